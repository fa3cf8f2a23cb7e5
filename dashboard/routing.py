from django.urls import path

from dashboard.cluster.consumers import ClusterConsumer, JobsConsumer
from dashboard.core.consumers import LiveConsumer
from dashboard.gpus.consumers import DemandsConsumer, GpusConsumer
from dashboard.triage.consumers import TriageConsumer
from dashboard.trials.consumers import ExperimentConsumer, ExperimentsConsumer, TrialConsumer

websocket_urlpatterns = [
    path("ws/triage/", TriageConsumer.as_asgi()),
    path("ws/cluster/", ClusterConsumer.as_asgi()),
    path("ws/jobs/", JobsConsumer.as_asgi()),
    path("ws/alerts/", LiveConsumer.as_asgi()),  # pages with only the header's live parts
    path("ws/gpus/", GpusConsumer.as_asgi()),
    path("ws/demands/", DemandsConsumer.as_asgi()),
    path("ws/experiments/", ExperimentsConsumer.as_asgi()),
    path("ws/experiments/<int:pk>/", ExperimentConsumer.as_asgi()),
    path("ws/trials/<int:pk>/", TrialConsumer.as_asgi()),
]
