from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from dashboard.actions import api as actions_api
from dashboard.actions import views as actions_views
from dashboard.agents import api as agents_api
from dashboard.agents import coverage_api
from dashboard.agents import views as agents_views
from dashboard.alerts import api as alerts_api
from dashboard.alerts import views as alerts_views
from dashboard.cluster import api as cluster_api
from dashboard.cluster import views as cluster_views
from dashboard.core import api as core_api
from dashboard.core import views as core_views
from dashboard.core.login import RateLimitedLoginView
from dashboard.gpus import api as gpus_api
from dashboard.gpus import views as gpus_views
from dashboard.metrics import views as metrics_views
from dashboard.triage import views as triage_views
from dashboard.trials import api as trials_api
from dashboard.trials import views as trials_views

urlpatterns = [
    path("", triage_views.home_page, name="home"),
    path("login/", RateLimitedLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", core_views.healthz, name="healthz"),
    path("metrics", metrics_views.metrics, name="metrics"),
    path("cluster/", cluster_views.cluster_page, name="cluster"),
    path("experiments/", trials_views.experiments_page, name="experiments"),
    path("experiments/<int:pk>/", trials_views.experiment_page, name="experiment"),
    path("trials/<int:pk>/", trials_views.trial_page, name="trial"),
    path("gpus/", gpus_views.gpu_wall, name="gpus"),
    path("gpus/<str:uuid>/", gpus_views.gpu_page, name="gpu"),
    path("nodes/<str:node_id>/", gpus_views.node_page, name="node"),
    path("demands/", gpus_views.demands_page, name="demands"),
    path("alerts/", alerts_views.alerts_page, name="alerts"),
    path("audit/", actions_views.audit_page, name="audit"),
    path("jobs/", actions_views.jobs_page, name="jobs"),
    path("incidents/<int:pk>/", alerts_views.incident_page, name="incident"),
    path("alerts/silences/", alerts_views.silences_page, name="silences"),
    path("alerts/silences/<int:pk>/end", alerts_views.silence_end, name="silence-end"),
    path("alerts/channels/", alerts_views.channels_page, name="channels"),
    path("alerts/channels/<int:pk>/", alerts_views.channel_page, name="channel"),
    path("alerts/channels/<int:pk>/test", alerts_views.channel_test, name="channel-test"),
    path("alerts/channels/<int:pk>/delete", alerts_views.channel_delete, name="channel-delete"),
    path("api/nodes/", cluster_api.NodeList.as_view(), name="api-nodes"),
    path("api/gpus/", gpus_api.GpuList.as_view(), name="api-gpus"),
    path("api/gpus/wall/", gpus_api.GpuWall.as_view(), name="api-gpu-wall"),
    path("api/gpus/<str:uuid>/samples/", gpus_api.GpuSamples.as_view(), name="api-gpu-samples"),
    path("api/actors/", cluster_api.ActorList.as_view(), name="api-actors"),
    path("api/jobs/", cluster_api.JobList.as_view(), name="api-jobs"),
    path("api/demands/", cluster_api.DemandList.as_view(), name="api-demands"),
    path("api/trials/", trials_api.TrialList.as_view(), name="api-trials"),
    path("api/trials/<int:pk>/results/", trials_api.TrialResults.as_view(),
         name="api-trial-results"),
    path("api/trials/<int:pk>/stack", trials_api.TrialStackView.as_view(),
         name="api-trial-stack"),
    path("api/trials/<int:pk>/output", trials_api.TrialOutputView.as_view(),
         name="api-trial-output"),
    path("api/experiments/<int:pk>/trials/", trials_api.ExperimentTrials.as_view(),
         name="api-experiment-trials"),
    path("api/experiments/<int:pk>/curves/", trials_api.ExperimentCurves.as_view(),
         name="api-experiment-curves"),
    path("api/alerts/", alerts_api.AlertList.as_view(), name="api-alerts"),
    path("api/alerts/<int:pk>/", alerts_api.AlertDetail.as_view(), name="api-alert"),
    path("api/alerts/<int:pk>/ack", alerts_api.AlertAck.as_view(), name="api-alert-ack"),
    path("api/silences/", alerts_api.SilenceList.as_view(), name="api-silences"),
    path("api/silences/preview", alerts_api.SilencePreview.as_view(),
         name="api-silence-preview"),
    path("api/trials/<int:pk>/terminate", actions_api.TerminateTrial.as_view(),
         name="api-trial-terminate"),
    path("api/jobs/<str:job_id>/stop", actions_api.StopJob.as_view(), name="api-job-stop"),
    path("api/gpus/<str:uuid>/processes/<int:pid>/kill", actions_api.KillProcess.as_view(),
         name="api-process-kill"),
    path("api/actions/<int:pk>/", actions_api.ActionDetail.as_view(),
         name="api-action"),
    path("api/audit/", actions_api.AuditList.as_view(), name="api-audit"),
    path("api/cluster/", cluster_api.ClusterView.as_view(), name="api-cluster"),
    path("api/clusters/", cluster_api.ClusterList.as_view(), name="api-clusters"),
    path("api/clusters/<str:name>/approve", cluster_api.ClusterDecision.as_view(approve=True),
         name="api-cluster-approve"),
    path("api/clusters/<str:name>/refuse", cluster_api.ClusterDecision.as_view(approve=False),
         name="api-cluster-refuse"),
    path("api/triage/", triage_views.TriageView.as_view(), name="api-triage"),
    path("api/sources/", core_api.SourceHealthList.as_view(), name="api-sources"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/agents/coverage/", coverage_api.AgentCoverage.as_view(), name="api-agent-coverage"),
    path("agents/", agents_views.agents_page, name="agents"),
    path("agents/<int:pk>/revoke", agents_views.revoke, name="agent-revoke"),
    # Node agents (docs/agent-protocol.md): node tokens only, not in the API schema.
    path("api/agent/v1/hello", agents_api.hello, name="agent-hello"),
    path("api/agent/v1/report", agents_api.report, name="agent-report"),
    path("api/agent/v1/commands", agents_api.pending_commands, name="agent-commands"),
    path("api/agent/v1/commands/<int:pk>/result", agents_api.command_result,
         name="agent-command-result"),
    path("admin/", admin.site.urls),
]
