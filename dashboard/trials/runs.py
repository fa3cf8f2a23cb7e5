"""An RL run's process: the trainer actor that drives its steps and writes its log.

verl, EasyR1 and OpenRLHF each run their training loop in one Ray actor (verl's
`TaskRunner`, EasyR1's `Runner`, OpenRLHF's `PPOTrainer`: docs/ray-facts.md), on the
node whose disk the run's log is on. Their log lines name no process, so a run is tied
to the one live trainer actor of its framework on the node its log was read on (an
agent's node, or raywatch's own host for its own reader): that actor's pid and node
become the run's, and from there liveness, status, stacks and Stop work as for a Tune
trial. Two live trainers of one framework on one node are told apart by the one that
holds the run's log file open, as the node's reader found it (verl's file logger and
TensorBoard's writer keep theirs open; EasyR1's opens it per line): otherwise the run
stays unbound. Once its trainer is gone, the run's status is its Ray job's.

A Ray Train V2 run (its log written by raywatch's callback in its `TrainController`, on
the driver's node) runs its training function in a thread of each rank's
`RayTrainWorker`. Where Train's state API lists the run (dashboard/cluster/trainruns.py,
matched by name), its status is Train's and its process rank 0's; else it is tied to its
controller as the others are to their trainers.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from functools import reduce
from operator import or_
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from collectors.agent.trialwire import place_node
from collectors.hostinfo import node_ip_address
from collectors.pystack import RAY_GET, rank_place
from collectors.records import EASYR1, OPENRLHF, RAYTRAIN, VERL
from collectors.runformats import (
    CONSOLE_FRAMEWORKS,
    RANK_WORKER,
    TRAINER_CLASSES,
    TRAINERS,
    console_run_key,
    console_trainer_framework,
    entrypoint_framework,
    job_run_name,
    run_job_id,
    train_run_dir,
)
from dashboard.cluster.callstacks import request_stacks
from dashboard.cluster.failures import (
    failed_jobs_since,
    first_failure,
    job_call_names,
    job_crash,
)
from dashboard.cluster.models import (
    Actor,
    CallFailure,
    CallStack,
    CallTiming,
    Demand,
    Job,
    Node,
    RayCall,
    TrainRun,
)
from dashboard.cluster.views_data import call_places, call_stacks
from dashboard.incidents.models import Incident
from dashboard.incidents.trial_rules import derive_status
from dashboard.trials.models import Experiment, RunRank, Trial

FOLLOW_DEPTH = 3  # calls of calls followed down from a trainer waiting in ray.get
# The calls looked at a level, the longest-running first (a step's rollout over 64 ranks
# is 64 calls of one name): what a run's verdict costs stays bounded however many run.
FOLLOW_CALLS = 8
# A trainer's ended job says how the run ended (Trial statuses).
JOB_ENDS = {"SUCCEEDED": "TERMINATED", "STOPPED": "TERMINATED", "FAILED": "ERROR"}
# Ray Train's run statuses as Trial statuses; ABORTED (killed, or its controller died)
# is no clean end.
TRAIN_STATUSES = {"INITIALIZING": "PENDING", "SCHEDULING": "PENDING", "RUNNING": "RUNNING",
                  "RESTARTING": "RUNNING", "RESIZING": "RUNNING", "FINISHED": "TERMINATED",
                  "ERRORED": "ERROR", "ABORTED": "ERROR"}


# The function whose thread does a run's work, as py-spy names its frame: the thread a
# hang verdict reads (collectors/pystack.thread_running). The trainers' loops; a Ray Train
# rank runs the user's function in a thread its ThreadRunner starts from `_run_target`
# (ray/train/v2/_internal/execution/worker_group/thread_runner.py); a Tune function
# trainable, in a thread that runs the trainable by its own name.
WORKING_IN = {VERL: "run", EASYR1: "run", OPENRLHF: "fit", RAYTRAIN: "_run_target"}


def is_run(trial: Trial) -> bool:
    return trial.framework in TRAINERS


def working_in(trial: Trial) -> str:
    """The function whose thread does the trial's or run's work (WORKING_IN)."""
    return WORKING_IN.get(trial.framework, trial.trainable)


def runs_to_bind(since: datetime) -> Q | None:
    """The runs whose trainer Ray may list otherwise since `since`, for an evaluation to
    tie again (bind_runs) though their logs did not move: every run of a cluster where a
    trainer actor came, went or changed, and the Ray Train runs whose listing changed. A
    run whose last line was read before its trainer or Train listing was seen (a run
    that hangs early) is tied then. None: nothing moved."""
    names = TRAINER_CLASSES | {RANK_WORKER}
    clusters = set(Actor.objects.filter(class_name__in=names, updated_at__gte=since)
                   .values_list("cluster_id", flat=True))
    listed = {train_run_dir(name) for name in TrainRun.objects.filter(
        updated_at__gte=since).values_list("name", flat=True)}
    found = []
    if clusters:
        found.append(Q(experiment__cluster_id__in=clusters, framework__in=list(TRAINERS)))
    if listed:
        found.append(Q(framework=RAYTRAIN, trial_id__in=listed))
    return reduce(or_, found) if found else None


def runs_of_failed_jobs(since: datetime | None) -> Q | None:
    """The runs whose trainer's job had failures stored since `since` (Ray lists a job's
    failed calls one worker at a time): their error is its first failure, which may have
    come after the trainer's own. Looked at though they ended. None: no such runs."""
    jobs = failed_jobs_since(since)
    if not jobs:
        return None
    names = TRAINER_CLASSES
    trainers = [(a.cluster_id, a.pid) for a in Actor.objects.filter(
        cluster_id__in={c for c, _ in jobs}, job_id__in={j for _, j in jobs},
        class_name__in=names, pid__isnull=False) if (a.cluster_id, a.job_id) in jobs]
    found = [Q(experiment__cluster_id=c, pid=p, framework__in=list(TRAINERS))
             for c, p in trainers]
    return reduce(or_, found) if found else None


def trainer_class(actor: Actor) -> str:
    return actor.class_name.rsplit(".", 1)[-1]


def run_classes(framework: str) -> tuple[str, ...]:
    """The actor classes whose process may be a run's: its trainer's, and a Ray Train
    run's ranks' workers."""
    return TRAINERS.get(framework, ()) + ((RANK_WORKER,) if framework == RAYTRAIN else ())


def bind_runs(trials: list[Trial]) -> set[int]:
    """Tie each RL run among `trials` to its trainer actor (pid, node address, host) and,
    once that actor is gone, take its job's end as the run's; the pks of the runs whose
    row changed."""
    runs = [t for t in trials if is_run(t)]
    if not runs:
        return set()
    clusters = {t.experiment.cluster_id for t in runs}
    nodes = {(n.cluster_id, n.node_id): n for n in Node.objects.filter(cluster_id__in=clusters)}
    names = TRAINER_CLASSES | {RANK_WORKER}
    trainers: dict[tuple[int, str], list[Actor]] = defaultdict(list)
    for actor in Actor.objects.filter(cluster_id__in=clusters, pid__isnull=False,
                                      class_name__in=names):
        node = nodes.get((actor.cluster_id, actor.node_id))
        if node is not None and trainer_class(actor) in names:
            trainers[(actor.cluster_id, node.node_ip)].append(actor)
    listed = listed_train_runs(runs)
    changed = set()
    for run in runs:
        before = (run.pid, run.node_ip, run.hostname, run.tune_status, run.process_alive,
                  run.error_text)
        train = listed.get(train_key(run))
        if train is not None:
            bind_listed(run, train, nodes)
        else:
            bind(run, trainers, nodes)
        if (run.pid, run.node_ip, run.hostname, run.tune_status, run.process_alive,
                run.error_text) != before:
            changed.add(run.pk)
    return changed


def train_key(run: Trial) -> tuple[int, str, str]:
    """(cluster pk, Ray job, trial id) of a Ray Train run: what ties it to the run Train's
    state API lists (listed_train_runs). A run of the same name in another job is
    another run."""
    return run.experiment.cluster_id, run_job_id(run.experiment.name), run.trial_id


def listed_train_runs(runs: list[Trial]) -> dict[tuple[int, str, str], TrainRun]:
    """The newest run of each name in each job that Train's state API lists, by
    train_key."""
    clusters = {r.experiment.cluster_id for r in runs if r.framework == RAYTRAIN}
    if not clusters:
        return {}
    return {(row.cluster_id, row.job_id, train_run_dir(row.name)): row for row in
            TrainRun.objects.filter(cluster_id__in=clusters).order_by("started_at", "pk")}


def bind_listed(run: Trial, train: TrainRun, nodes: dict[tuple[int, str], Node]) -> None:
    """A Ray Train run its state API lists: its status is Train's, its process rank 0's
    (kept once the run ended, to say it is gone)."""
    run.tune_status = TRAIN_STATUSES.get(train.status, "")
    rank0 = next((w for w in train.workers if w.get("rank") == 0 and w.get("pid")), None)
    if rank0 is None:
        return  # no worker yet: Train is still placing the run
    node = nodes.get((train.cluster_id, rank0.get("node_id") or ""))
    run.pid = rank0["pid"]
    run.node_ip = node.node_ip if node is not None else str(rank0.get("node_ip") or "")
    run.hostname = (node.hostname or "") if node is not None else ""


def bind(run: Trial, trainers: dict[tuple[int, str], list[Actor]],
         nodes: dict[tuple[int, str], Node]) -> None:
    where = run.node_ip or run_address(run)
    # A console run is its writer's: a Ray Train run read from its ranks' own logs is
    # rank 0's RayTrainWorker; the others, their trainer's.
    classes = run_classes(run.framework) if is_console_run(run) else TRAINERS[run.framework]
    mine = [a for a in trainers.get((run.experiment.cluster_id, where), [])
            if trainer_class(a) in classes]
    alive = [a for a in mine if a.state == "ALIVE"]
    if is_console_run(run):
        # Its console is its trainer's own: that process, or none (never another
        # trainer of the node, however alone).
        mine = [a for a in mine if a.pid == run.writer_pid]
        alive = [a for a in alive if a.pid == run.writer_pid]
    else:
        # A file a job can write anywhere under a log root is no trainer's by being
        # there: the run is the trainer's that holds it open or works where it lies, as
        # that node's agent saw (its writer_pid), never the node's only trainer by
        # default (issue 43, M2). That trainer's console run is judged meanwhile.
        alive = [a for a in alive if run.writer_pid and a.pid == run.writer_pid]
    if len(alive) == 1:
        actor = alive[0]
        node = nodes[(actor.cluster_id, actor.node_id)]
        run.pid, run.node_ip, run.hostname = actor.pid, node.node_ip, node.hostname
        run.tune_status = ""
        return
    if alive or run.pid is None:
        return  # several live trainers there (not told apart), or none ever seen
    gone = next((a for a in mine if a.pid == run.pid), None)
    if gone is not None and gone.state == "DEAD":
        failure = first_failure(gone.cluster_id, gone.job_id)
        if failure is not None:
            failed(run, failure, gone)
        else:
            status = Job.objects.filter(cluster_id=gone.cluster_id, job_id=gone.job_id
                                        ).values_list("status", flat=True).first()
            run.tune_status = JOB_ENDS.get(status or "", "")
        # Ray listed its trainer dead: its process is gone, though an evaluation made
        # while the cluster's view is not current (a slow poll) cannot say so, and an
        # ended run is not looked at for its liveness again.
        if run.process_alive is not False:
            run.process_alive = False
            run.process_gone_since = run.process_gone_since or gone.ended_at or gone.updated_at


def failed(run: Trial, failure: CallFailure, trainer: Actor | None) -> None:
    """The run ended with its job's first failed call: ERROR, with that call's error (a
    raised exception's traceback, an OOM kill), whatever the job's end says (a driver
    started by hand ends SUCCEEDED however its trainer ended)."""
    run.tune_status = Trial.ERROR
    run.error_text = failure.describe(job_call_names(failure.cluster_id, failure.job_id),
                                      job_crash(failure.cluster_id, failure.job_id))
    run.error_at = failure.failed_at or (trainer.ended_at if trainer else None) \
        or failure.seen_at
    run.error_read_at = failure.seen_at
    run.error_attempt = run.attempt


def is_console_run(run: Trial) -> bool:
    return run.experiment.kind == Experiment.CONSOLE


def discover_runs(since: datetime | None) -> int:
    """Every live trainer actor of verl, EasyR1 or OpenRLHF that Ray lists (since `since`;
    None: all) is a run from that moment, before it prints a step and with nothing
    configured: its job's run `job <id>` / `<class> <pid>` (console_run_key), on the
    actor's node, its console read there by that node's agent. A trainer already tied to
    a run read from its own log files is that run and gets no second one. How many
    runs were made."""
    names = [n for framework in CONSOLE_FRAMEWORKS for n in TRAINERS[framework]]
    actors = Actor.objects.filter(class_name__in=names, state="ALIVE", pid__isnull=False)
    if since is not None:
        actors = actors.filter(updated_at__gte=since)
    made = 0
    for actor in actors:
        node = Node.objects.filter(cluster_id=actor.cluster_id, node_id=actor.node_id).first()
        framework = console_trainer_framework(trainer_class(actor))
        if node is None or not framework or not actor.job_id or bound_elsewhere(
                actor.cluster_id, node.node_ip, actor.pid):
            continue
        name, trial_id = console_run_key(actor.job_id, trainer_class(actor), actor.pid)
        experiment, _ = Experiment.objects.get_or_create(
            cluster_id=actor.cluster_id, name=name,
            defaults={"kind": Experiment.CONSOLE, "paths": []})
        if experiment.kind != Experiment.CONSOLE:
            continue  # a directory of that name: not this job's runs
        found = {"framework": framework, "trainable": trainer_class(actor),
                 "pid": actor.pid, "writer_pid": actor.pid, "node_ip": node.node_ip,
                 "hostname": node.hostname or "", "process_alive": True,
                 "status": Trial.RUNNING, "status_reason": "its actor is alive"}
        # The run found from its job before this trainer started is this run.
        if adopt_job_run(experiment, trial_id, found):
            continue
        _, created = Trial.objects.get_or_create(experiment=experiment, trial_id=trial_id,
                                                 defaults=found)
        made += created
    return made + discover_job_runs(since)


def adopt_job_run(experiment: Experiment, trial_id: str, found: dict[str, Any]) -> bool:
    """The run found from its job (`driver <pid>`) becomes its trainer's run `trial_id`;
    whether there was one. When the trainer's console spoke first (its node's agent sent
    its lines before Ray's poll listed it), the trainer's row is the run: the job's row's
    incidents (its demand) move to it and that row goes; renaming it onto the trainer's
    would break the unique key and fail every detector pass after."""
    with transaction.atomic():
        waiting = list(Trial.objects.select_for_update().filter(
            BEFORE_TRAINER, experiment=experiment).exclude(trial_id=trial_id))
        if not waiting:
            return False
        existing = Trial.objects.filter(experiment=experiment, trial_id=trial_id).first()
        if existing is None:
            Trial.objects.filter(pk=waiting[0].pk).update(trial_id=trial_id, tune_status="",
                                                          **found)
            waiting = waiting[1:]
        else:
            Trial.objects.filter(pk=existing.pk, pid__isnull=True).update(**found)
        keeper = existing or Trial.objects.get(experiment=experiment, trial_id=trial_id)
        for before in waiting:
            Incident.objects.filter(trial=before).update(trial=keeper)
            before.delete()
    return True


DRIVER = "driver "  # the trial id of a run found from its job, before its trainer started
# Such a run, its trainer not yet seen: no process of its own.
BEFORE_TRAINER = Q(pid__isnull=True, trial_id__startswith=DRIVER)


def discover_job_runs(since: datetime | None) -> int:
    """Each Ray job whose entrypoint starts a framework's run (`python -m
    openrlhf.cli.train_ppo_ray`, collectors.runformats.entrypoint_framework) is a run from
    the moment Ray lists the job, before its trainer exists: OpenRLHF's driver makes and
    waits on its placement groups first, and demand that never places is then this
    run's. Named `job <id>` / `driver <pid>`, PENDING; the trainer, once Ray lists it,
    takes the row over (discover_runs). A job that ended before its trainer started ends
    its run. The entrypoint only names the framework: no process is bound by it."""
    jobs = Job.objects.exclude(job_id="").exclude(entrypoint="")
    if since is None:
        jobs = jobs.filter(status="RUNNING")
    else:  # changed, or whose failures Ray listed since (they come a poll or two late)
        failing = [Q(cluster_id=c, job_id=j) for c, j in failed_jobs_since(since)]
        jobs = jobs.filter(reduce(or_, failing, Q(updated_at__gte=since)))
    made = 0
    for job in jobs:
        framework = entrypoint_framework(job.entrypoint)
        if not framework:
            continue
        name = job_run_name(job.job_id)
        experiment = Experiment.objects.filter(cluster_id=job.cluster_id, name=name).first()
        if experiment is not None and experiment.kind != Experiment.CONSOLE:
            continue
        # A job first seen ended (since the last pass: not history) ended its run before
        # raywatch could see its trainer.
        if (experiment is None or not experiment.trials.exists()) and (
                job.status == "RUNNING" or since is not None):
            experiment, _ = Experiment.objects.get_or_create(
                cluster_id=job.cluster_id, name=name,
                defaults={"kind": Experiment.CONSOLE, "paths": []})
            status, reason = derive_status(Trial.PENDING, False, None, run=True)
            _, created = Trial.objects.get_or_create(
                experiment=experiment, trial_id=f"{DRIVER}{job.driver_pid or '?'}"[:255],
                defaults={"framework": framework, "node_ip": job.driver_node_ip,
                          "tune_status": Trial.PENDING, "status": status,
                          "status_reason": reason})
            made += created
        if job.status != "RUNNING" and experiment is not None:
            end_before_trainer(experiment, job)  # it never got a trainer: the job's end
    return made


def bound_elsewhere(cluster_id: int, node_ip: str, pid: int | None) -> bool:
    """Whether a run read from its own log files (not its console) is tied to this
    trainer process: that run speaks for it."""
    return Trial.objects.filter(experiment__cluster_id=cluster_id, node_ip=node_ip, pid=pid,
                                framework__in=list(TRAINERS)
                                ).exclude(experiment__kind=Experiment.CONSOLE).exists()


def shadowed(runs: list[Trial]) -> set[int]:
    """The runs among `runs` that another run of the same work speaks for, judged instead
    (one hang, one incident): a console run whose trainer a file-logged run is tied to."""
    return {r.pk for r in runs if is_console_run(r) and r.pid and r.framework != RAYTRAIN
            and bound_elsewhere(r.experiment.cluster_id, r.node_ip, r.pid)}


def writing_others(run: Trial, where: str, alive: list[Actor]) -> set[int]:
    """The pids among `alive` that hold another run's log open on that node (and not this
    run's too: one trainer may write a file log and a TensorBoard run): that run's
    trainer, never this one's, though it be the only trainer Ray lists there yet."""
    pids = {a.pid for a in alive} - {run.writer_pid}
    if not pids:
        return set()
    return set(Trial.objects.filter(experiment__cluster_id=run.experiment.cluster_id,
                                    writer_pid__in=pids)
               .filter(Q(node_ip=where) | Q(node_ip="")).exclude(pk=run.pk)
               .exclude(experiment__kind=Experiment.CONSOLE)  # its console: no other log
               .values_list("writer_pid", flat=True))


def run_address(run: Trial) -> str:
    """Where the run's log was read: the agent's node for "node:/dir" paths (matched to
    Ray's node by its host name, as agents are), else raywatch's own host. A Ray Train
    run's ranks are read on their nodes: its place is rank 0's."""
    paths: list[Any] = run.experiment.paths or []
    named = next((node for p in paths if isinstance(p, str)
                  and (node := place_node(p)) is not None), None)
    if run.framework == RAYTRAIN:
        rank_0 = RunRank.objects.filter(trial=run, rank=0).values_list("node", flat=True)
        if not rank_0:
            return ""  # rank 0's log not read yet: no place to bind it at
        named = rank_0[0] or None
    if named is None:
        return settings.NODE_IP or node_ip_address()
    return Node.objects.filter(cluster_id=run.experiment.cluster_id, hostname=named
                               ).values_list("node_ip", flat=True).first() or ""


def trainer_job(run: Trial) -> str:
    """The Ray job of the run's live trainer actor (its pid on its node), or "": the job
    whose calls are the run's steps."""
    if not is_run(run) or not run.pid:
        return ""
    nodes = Node.objects.filter(cluster_id=run.experiment.cluster_id, node_ip=run.node_ip
                                ).values_list("node_id", flat=True)
    return Actor.objects.filter(cluster_id=run.experiment.cluster_id, pid=run.pid,
                                state="ALIVE", node_id__in=list(nodes)
                                ).values_list("job_id", flat=True).first() or ""


def runs_by_job(jobs: set[tuple[int, str]]) -> dict[tuple[int, str], Trial]:
    """The bound runs whose live trainer actors are in these (cluster pk, job id): whose
    steps those jobs' calls are. An overdue call of one is its run's incident (the run
    page lists it, its health says so)."""
    jobs = {(c, j) for c, j in jobs if j}
    if not jobs:
        return {}
    clusters = {c for c, _ in jobs}
    names = {name for framework in TRAINERS for name in run_classes(framework)}
    trainers = [(a.cluster_id, a.node_id, a.pid, a.job_id) for a in Actor.objects.filter(
        cluster_id__in=clusters, job_id__in={j for _, j in jobs}, state="ALIVE",
        pid__isnull=False, class_name__in=names) if (a.cluster_id, a.job_id) in jobs]
    if not trainers:
        return before_trainers(jobs)
    ips = {(n.cluster_id, n.node_id): n.node_ip for n in Node.objects.filter(
        cluster_id__in=clusters, node_id__in={t[1] for t in trainers})}
    # A trainer's file-logged run speaks for it over its console run (shadowed): last in.
    runs = {(t.experiment.cluster_id, t.node_ip, t.pid): t for t in sorted(
        Trial.objects.filter(experiment__cluster_id__in=clusters,
                             pid__in={t[2] for t in trainers}, framework__in=list(TRAINERS)
                             ).select_related("experiment"),
        key=lambda t: not is_console_run(t))}
    found = {}
    for cluster_id, node_id, pid, job_id in trainers:
        run = runs.get((cluster_id, ips.get((cluster_id, node_id), ""), pid))
        if run is not None:
            found[(cluster_id, job_id)] = run
    return found | before_trainers(jobs - set(found))


def end_before_trainer(experiment: Experiment, job: Job) -> None:
    """The run found from `job` whose trainer raywatch never saw ended with its job: with
    its job's first failed call when Ray lists one (a trainer that raised before the
    first poll), else as its job ended."""
    failure = first_failure(job.cluster_id, job.job_id)
    for run in Trial.objects.filter(BEFORE_TRAINER, experiment=experiment):
        before = (run.tune_status, run.error_text)
        if failure is not None:
            failed(run, failure, None)
        else:
            run.tune_status = JOB_ENDS.get(job.status, Trial.TERMINATED)
        run.status, run.status_reason = derive_status(
            run.tune_status, bool(run.error_text), None, run=True)
        if (run.tune_status, run.error_text) != before:
            run.save(update_fields=["tune_status", "status", "status_reason", "error_text",
                                    "error_at", "error_read_at", "error_attempt",
                                    "updated_at"])


def before_trainers(jobs: set[tuple[int, str]]) -> dict[tuple[int, str], Trial]:
    """The runs of these (cluster pk, job id) found from their jobs, whose trainers have
    not started (discover_job_runs)."""
    if not jobs:
        return {}
    names = {job_run_name(j): j for _, j in jobs}
    return {(t.experiment.cluster_id, names[t.experiment.name]): t for t in Trial.objects.filter(
        BEFORE_TRAINER, experiment__kind=Experiment.CONSOLE,
        experiment__name__in=list(names), experiment__cluster_id__in={c for c, _ in jobs}
        ).select_related("experiment")
        if (t.experiment.cluster_id, names[t.experiment.name]) in jobs}


def waits_on_a_call(run: Trial) -> bool:
    """An RL run whose trainer's Ray job runs a call that call_overdue judges: one it
    already calls overdue, or one still within its limit whose name has a usual duration
    (the reward call of the step in progress); or whose job waits for resources Ray has
    not given it (a placement group for its workers: demand_pending/_infeasible judge it).
    The run is silent because its trainer waits on that call, and whether the call hangs
    is call_overdue's to say, at the call's own limit: one hang, one incident. The run's
    trial_stalled is not raised beside it, nor before it (the run fell silent at its last
    step, before the call began, so its stall limit would come first). Bounded: the call
    ends, or it is overdue; the demand is placed, or it is alerted."""
    job = trainer_job(run)
    if not job:
        return False
    cluster = run.experiment.cluster_id
    if Incident.objects.filter(kind="call_overdue", state=Incident.FIRING, cluster_id=cluster,
                               details__job_id=job).exists():
        return True
    if Demand.objects.filter(cluster_id=cluster, job_id=job).exists():
        return True  # its job waits for resources: demand_pending/_infeasible says so
    running = RayCall.objects.filter(cluster_id=cluster, job_id=job).exclude(
        pid=run.pid).values_list("name", flat=True)  # the trainer's own run call is the run
    return bool(CallTiming.usuals((cluster, job, name) for name in running))


def waited_call_ended(run: Trial, since: datetime) -> bool:
    """Whether a call of the run's job has ended since `since` (CallTiming learns each
    ended call, a job's first of a name included)."""
    job = trainer_job(run)
    return bool(job) and CallTiming.objects.filter(
        cluster_id=run.experiment.cluster_id, job_id=job, updated_at__gt=since).exists()


def follow_ray_get(run: Trial, now: datetime) -> tuple[bool | None, str] | None:
    """A run whose trainer's stacks say it waits in `ray.get`: the verdict of the calls
    its trainer's run call made that run now (a step's rollout, its reward: Ray names each
    call's parent), whose stacks are asked for here (once a call,
    dashboard/cluster/callstacks.py), followed down while one of them waits in `ray.get`
    too. (True, words) when one is hung: the run is stalled in that call; (False, words)
    when each is busy: a long rollout, not a hang; (None, "") while their stacks are
    awaited. None: its trainer runs no such call, and its own verdict stands."""
    cluster = run.experiment.cluster_id
    job = trainer_job(run)
    own = RayCall.objects.filter(cluster_id=cluster, job_id=job, pid=run.pid) if job else None
    parents = set(own.values_list("task_id", flat=True)) if own is not None else set()
    words: list[str] = []
    for _ in range(FOLLOW_DEPTH):
        calls = list(RayCall.objects.filter(cluster_id=cluster, parent_task_id__in=parents)
                     .exclude(pid__isnull=True).order_by("first_seen_at", "task_id")
                     [:FOLLOW_CALLS])
        if not calls:
            return None if not words else (None, "")
        nodes, _ = call_places(calls)
        request_stacks(cluster, [(c.task_id, c.name, c.pid, nodes.get(c.node_id, ""),
                                  c.job_id) for c in calls], now)
        stacks = call_stacks(cluster, [c.task_id for c in calls])
        straggler = call_straggler(calls, stacks, nodes)
        if straggler is not None:
            if straggler[0] is None:
                return None, ""  # some ranks wait in a collective: the others' stacks first
            return straggler[0], f"waits in ray.get on {' -> '.join([*words, straggler[1]])}"
        waiting = []
        for call in calls:
            stack = stacks.get(call.task_id)
            if stack is None or not stack.hung:
                continue
            node = nodes.get(call.node_id) or "an unknown node"
            if stack.waits_on != RAY_GET:
                chain = " -> ".join([*words, f"{call.name} (pid {call.pid} on {node})"])
                return True, f"waits in ray.get on {chain}, {stack.verdict}"
            waiting.append(call)
        if not waiting:
            if all((s := stacks.get(c.task_id)) is not None and s.hung is False for c in calls):
                names = ", ".join(sorted({c.name for c in calls}))
                return False, f"waits in ray.get on {names}, busy"
            return None, ""
        words.append(f"{waiting[0].name} (pid {waiting[0].pid})")
        parents = {c.task_id for c in waiting}
    return None, ""


def call_straggler(calls: list[RayCall], stacks: dict[str, CallStack], nodes: dict[str, str]
                   ) -> tuple[bool | None, str] | None:
    """Calls of one name on several actors (a worker group's ranks: verl's WorkerDicts,
    OpenRLHF's actor and vLLM groups) of which some wait in a collective and some do
    not: the first that does not is the rank the others wait for, named with its actor
    (verl names its workers `WorkerDict_<pool>:<local rank>`) and its own verdict. (None,
    "") while the stacks of a name's calls are still awaited (a rank waiting in the
    collective is never named for the rank it waits on); None: no such split."""
    by_name: dict[str, list[RayCall]] = defaultdict(list)
    for call in calls:
        by_name[call.name].append(call)
    for name, group in by_name.items():
        if len(group) < 2:
            continue
        taken = [(c, stacks.get(c.task_id)) for c in group]
        if any(s is None or s.state == CallStack.PENDING for _, s in taken):
            return None, ""  # the ranks are judged together, or a waiting one is named
        # Where each stands, from its last dump (hung or busy alike: a rank in gloo's
        # all_reduce may spin); a stack that could not be taken says nothing.
        method = name.rsplit(".", 1)[-1]
        places = {c.task_id: p for c, s in taken if s is not None and s.text
                  and (p := rank_place([s.text], method)) is not None}
        waiting = [c for c in group if c.task_id in places and places[c.task_id].in_collective]
        out = [(c, s) for c, s in taken if s is not None and c.task_id in places
               and not places[c.task_id].in_collective and s.waits_on != RAY_GET]
        if not waiting or not out:
            continue
        call, stack = out[0]
        actor = Actor.objects.filter(cluster_id=call.cluster_id, actor_id=call.actor_id
                                     ).values_list("name", flat=True).first() if call.actor_id \
            else None
        node = nodes.get(call.node_id) or "an unknown node"
        who = f"{actor} (pid {call.pid} on {node})" if actor else f"pid {call.pid} on {node}"
        return stack.hung, (f"{name}: {who} is not in the collective where {len(waiting)} of "
                            f"{len(group)} calls wait; {stack.verdict}")
    return None


def in_run_calls(runs: list[Trial]) -> dict[int, bool]:
    """Whether each RL run's trainer process runs a call now, as Ray lists them (its run
    call, `TaskRunner.run`): one whose loop returned and whose actor lives on, idle,
    runs none, and its silence is no step in progress. One query for all. Not for a Ray
    Train run: its ranks train in a thread of their own, outside any call."""
    runs = [r for r in runs if r.framework in CONSOLE_FRAMEWORKS and r.pid]
    if not runs:
        return {}
    busy = set(RayCall.objects.filter(
        cluster_id__in={r.experiment.cluster_id for r in runs}, pid__in={r.pid for r in runs}
    ).values_list("cluster_id", "pid"))
    return {r.pk: (r.experiment.cluster_id, r.pid) in busy for r in runs}
