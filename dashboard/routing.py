from django.urls import path

from dashboard.cluster.consumers import ClusterConsumer

websocket_urlpatterns = [
    path("ws/cluster/", ClusterConsumer.as_asgi()),
]
