# One image for every raywatch process: web (uvicorn via `manage.py serve`),
# Celery worker and Celery beat. See docker-compose.yml.
FROM python:3.11-slim-bookworm
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 RAYWATCH_DATA_DIR=/var/lib/raywatch
WORKDIR /app
COPY pyproject.toml ./
COPY dashboard ./dashboard
COPY collectors ./collectors
RUN pip install --no-cache-dir .
COPY manage.py ./
COPY templates ./templates
COPY static ./static
RUN mkdir -p /var/lib/raywatch && python manage.py collectstatic --noinput -v 0
EXPOSE 8000
CMD ["python", "manage.py", "serve", "--host", "0.0.0.0", "--port", "8000", "--no-celery"]
