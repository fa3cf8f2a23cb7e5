# Two images, neither runs as root (docker-compose.yml, docs/deploying.md):
#   docker build .                 the server: web (uvicorn via `manage.py serve`), Celery
#                                  worker, notifier and beat, migrate. uid 10001.
#   docker build --target agent .  the node agent alone (collectors/ and psutil, orjson,
#                                  nvidia-ml-py, py-spy): no Django, no database driver.
#                                  uid AGENT_UID, Ray's user (it signals Ray's workers).
# Each installs only what its requirements/*.lock pins, every file checked by its hash
# (`make lock` writes them); pip never resolves anything here.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS base
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/app \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

# The agent stage comes first so that a plain `docker build .` gives the server.
FROM base AS agent
# Ray's user in rayproject/ray images; give the uid Ray runs as on your nodes.
ARG AGENT_UID=1000
COPY requirements/agent.lock requirements/
RUN pip install --require-hashes --no-deps -r requirements/agent.lock
# py-spy reads a hung trial's stack through ptrace. A non-root process keeps no capability
# across exec, so py-spy alone carries CAP_SYS_PTRACE as a file capability; it takes effect
# only where the container's bounding set holds it (compose: cap_add SYS_PTRACE).
RUN apt-get update && apt-get install -y --no-install-recommends libcap2-bin \
    && setcap cap_sys_ptrace=ep "$(command -v py-spy)" \
    && apt-get purge -y --auto-remove libcap2-bin && rm -rf /var/lib/apt/lists/*
COPY collectors ./collectors
RUN python -m compileall -q collectors \
    && groupadd --gid "$AGENT_UID" raywatch-agent \
    && useradd --uid "$AGENT_UID" --gid "$AGENT_UID" --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin raywatch-agent \
    && install -d -o "$AGENT_UID" -g "$AGENT_UID" -m 700 /var/lib/raywatch-agent
# The spool (and trial-log cursors): the one place it writes; a volume in compose.
ENV RAYWATCH_AGENT_SPOOL=/var/lib/raywatch-agent
USER ${AGENT_UID}:${AGENT_UID}
CMD ["python", "-m", "collectors.agent"]

FROM base AS server
ENV RAYWATCH_DATA_DIR=/var/lib/raywatch
COPY requirements/server.lock requirements/
RUN pip install --require-hashes --no-deps -r requirements/server.lock
# The code stays root's: the processes read it, they cannot change it.
COPY manage.py pyproject.toml ./
COPY dashboard ./dashboard
COPY collectors ./collectors
COPY templates ./templates
COPY static ./static
# A throwaway key for collectstatic: without one, settings would write a secret_key
# into RAYWATCH_DATA_DIR, and so into every copy of the image.
RUN python -m compileall -q dashboard collectors \
    && RAYWATCH_SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput -v 0 \
    && test ! -e /var/lib/raywatch/secret_key \
    && groupadd --gid 10001 raywatch \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/raywatch \
       --shell /usr/sbin/nologin raywatch \
    && chown 10001:10001 /var/lib/raywatch
# /var/lib/raywatch: the collected static files, root's; compose runs the containers
# read-only, beat's schedule in /tmp (tmpfs).
USER 10001:10001
EXPOSE 8000
CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-celery", "--no-agent"]
