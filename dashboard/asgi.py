"""ASGI entry point: HTTP through Django (agents' reports through a route of their own
in front of it), websockets through Channels.

Websockets need a logged-in session (checked in each consumer) and an Origin
that matches ALLOWED_HOSTS.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from dashboard.agents.reports import with_reports  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Agents' reports before Django's handler: hundreds a second (reports.py).
        "http": with_reports(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
