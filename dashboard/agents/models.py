"""Node agents that talk to raywatch over HTTP (docs/agent-protocol.md): their tokens,
the batches they sent, the commands raywatch gives them, the processes they watch."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from dashboard.cluster.models import cluster_field


class NodeToken(models.Model):
    """What lets one node's agent report that node and take its commands. Only the
    token's SHA-256 is kept, and the key that signs its commands sealed with a key from
    the settings: the token itself is shown once, when it is issued."""

    node = models.CharField(max_length=200)  # the node's name, as its GPUs and pages show it
    cluster = cluster_field()  # the cluster the node is in: what it reports belongs there
    # The node's address: set when issued, or pinned by the first report (then fixed).
    node_ip = models.CharField(max_length=64, blank=True, default="")
    ray_node_id = models.CharField(max_length=64, blank=True, default="")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)  # "rwa_" + 8 characters, to tell tokens apart
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(null=True, blank=True)
    last_address = models.CharField(max_length=64, blank=True, default="")
    agent_version = models.CharField(max_length=32, blank=True, default="")
    # The newest process snapshot stored for the node (on raywatch's clock: the agent's
    # time moved by ingest.AgentClock): older ones arriving late (after an outage) are not
    # applied over it.
    processes_at = models.DateTimeField(null=True, blank=True)
    spool_dropped = models.BigIntegerField(default=0)  # batches the agent's full spool lost
    # What the agent said it cannot do (its spool unwritable, a loop failing), as it said.
    agent_problems = models.JSONField(default=list, blank=True)
    # The agent's clock less raywatch's at its last report, whole seconds (null: unknown).
    clock_skew_s = models.IntegerField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, blank=True, default="")
    # HMAC(token, "raywatch-commands-v1"), sealed (sealing.py); "" for a token issued
    # before command keys: it reports, and takes no command until rotated.
    command_key_sealed = models.TextField(blank=True, default="")
    # The token stops working then: its expiry, or the end of its overlap once rotated.
    expires_at = models.DateTimeField(null=True, blank=True)
    replaced_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")

    class Meta:
        ordering = ["node", "-created_at"]
        indexes = [models.Index(fields=["node"], name="nodetoken_node"),
                   models.Index(fields=["node_ip"], name="nodetoken_node_ip")]

    def __str__(self) -> str:
        return f"{self.prefix}… for {self.node}"


class AgentStream(models.Model):
    """One agent spool's batches as received: the highest seq stored, so a batch sent
    again (its answer was lost) is acknowledged and not stored twice."""

    token = models.ForeignKey(NodeToken, on_delete=models.CASCADE, related_name="streams")
    stream = models.CharField(max_length=64)
    last_seq = models.BigIntegerField()
    updated_at = models.DateTimeField()
    # How far its data reaches: when the newest batch stored was polled, on raywatch's
    # clock (the report's receipt less the batch's age by the agent's own clock, so the
    # clocks need not agree). Behind updated_at while an agent sends a backlog; null: an
    # agent that does not say when it sent (updated_at is all there is).
    data_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["token", "stream"],
                                               name="one_row_per_agent_stream")]


class AgentCommand(models.Model):
    """Something raywatch asks of one node's agent, bound to the action (audit entry)
    that wanted it. Handed out once, before it expires; its result is taken once."""

    PENDING, FETCHED, DONE, EXPIRED = "pending", "fetched", "done", "expired"
    SIGNAL, STACK = "signal", "stack"

    node = models.CharField(max_length=200)
    # Of the node of this name in this cluster: two clusters may each have a "gpu-1".
    cluster = cluster_field()
    kind = models.CharField(max_length=32, default=SIGNAL)
    payload = models.JSONField()  # signal: {"pid", "signal", "create_time"}; stack: no signal
    audit_entry = models.ForeignKey("actions.AuditEntry", null=True, blank=True,
                                    on_delete=models.PROTECT, related_name="+")
    nonce = models.CharField(max_length=32)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    fetched_at = models.DateTimeField(null=True, blank=True)
    fetched_by = models.ForeignKey(NodeToken, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    done_at = models.DateTimeField(null=True, blank=True)
    # signalled/gone/refused; a stack: taken/failed/gone/refused
    outcome = models.CharField(max_length=16, blank=True, default="")
    result = models.TextField(blank=True, default="")  # what the agent said (a stack: the dump)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["node", "fetched_at", "expires_at"],
                                name="agentcommand_waiting")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} for {self.node}"

    @property
    def state(self) -> str:
        if self.done_at:
            return self.DONE
        if self.fetched_at:
            return self.FETCHED
        return self.EXPIRED if self.expires_at <= timezone.now() else self.PENDING


class NodeProcess(models.Model):
    """A process an agent watches on its node (a Ray worker or a GPU process), as of the
    node's latest snapshot."""

    # Of the node of this name in this cluster: two clusters may each have a "gpu-1".
    cluster = cluster_field()
    node = models.CharField(max_length=200)
    pid = models.IntegerField()
    create_time = models.FloatField()
    ppid = models.IntegerField(null=True)
    title = models.CharField(max_length=200, blank=True, default="")
    state = models.CharField(max_length=2, null=True)
    cpu_percent = models.FloatField(null=True)
    rss_bytes = models.BigIntegerField(null=True)
    threads = models.IntegerField(null=True)
    at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "node", "pid"],
                                               name="one_row_per_cluster_node_pid")]
        ordering = ["node", "pid"]
