"""The trial table of one experiment, a page at a time: filtered, sorted and paged here,
so a 10,000-trial search sends the browser the hundred rows it shows, not ten thousand.

SQL narrows by status and health; the text filter and the sort read only the columns
they need (the sort's one value, pulled out of the JSON in the database) for every
matching trial, and the page's rows are built last. The columns (which hyperparameters
differ across trials, which metrics exist) are worked out over every trial and kept a
few seconds per experiment: they change when trials come, not at every result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db import connection
from django.db.models import CharField, Count, F, Func, Max

from dashboard.core.jsonkeys import JsonPath
from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.objective import Objective, guess_mode, objective_of
from dashboard.trials.serializers import HEALTH_NAMES, HEALTH_ORDER, trial_rows

STATUSES = ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR", "UNKNOWN")
PAGE_SIZE, MAX_PAGE_SIZE = 100, 500
MAX_HP_COLUMNS = 6
MAX_TEXT = 200
FIXED_SORTS = ("trial_id", "status", "iteration", "best", "last", "step", "last_result_at",
               "node_ip", "health")
COLUMNS_KEEP_S = 10  # how long the columns of an experiment are kept between requests


class BadQuery(ValueError):
    """A query parameter that cannot be used: `errors` names each one and why."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


@dataclass(frozen=True)
class TableQuery:
    text: str = ""
    status: str = ""
    unhealthy: bool = False
    sort: str = "trial_id"
    descending: bool = False
    metric: str = ""  # "" : the search's own
    mode: str = ""  # "" : the search's own
    page: int = 1
    page_size: int = PAGE_SIZE

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TableQuery:
        errors: dict[str, str] = {}
        text = (params.get("q") or "").strip()
        if len(text) > MAX_TEXT:
            errors["q"] = f"at most {MAX_TEXT} characters"
        status = (params.get("status") or "").upper()
        if status and status not in STATUSES:
            errors["status"] = "one of " + ", ".join(STATUSES)
        unhealthy = (params.get("unhealthy") or "").lower()
        if unhealthy not in ("", "0", "1", "true", "false"):
            errors["unhealthy"] = "1 or 0"
        sort = params.get("sort") or "trial_id"
        if sort not in FIXED_SORTS and not (sort.startswith("hp:") and 3 < len(sort) <= 300):
            errors["sort"] = "one of " + ", ".join(FIXED_SORTS) + ", or hp:<config key>"
        direction = params.get("dir") or "asc"
        if direction not in ("asc", "desc"):
            errors["dir"] = "asc or desc"
        mode = params.get("mode") or ""
        if mode not in ("", "min", "max"):
            errors["mode"] = "min or max"
        metric = params.get("metric") or ""
        if len(metric) > 300:
            errors["metric"] = "at most 300 characters"
        page = _whole(params.get("page"), 1, "page", errors)
        size = _whole(params.get("page_size"), PAGE_SIZE, "page_size", errors)
        if size > MAX_PAGE_SIZE:
            errors["page_size"] = f"a whole number from 1 to {MAX_PAGE_SIZE}"
        if errors:
            raise BadQuery(errors)
        return cls(text=text, status=status, unhealthy=unhealthy in ("1", "true"), sort=sort,
                   descending=direction == "desc", metric=metric, mode=mode, page=page,
                   page_size=size)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _whole(raw: str | None, default: int, name: str, errors: dict[str, str]) -> int:
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) < 1:
        errors[name] = "a whole number from 1"
        return default
    return int(raw)


# --- how the page shows values (static/raywatch/trialkit.js fmt), for the text filter -------

def shown(value: Any) -> str:
    """A value as the table shows it: what the text filter matches."""
    if value is None:
        return "\u2013"  # the en dash the page shows
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        rounded = float(f"{value:.5g}")
        return str(int(rounded)) if rounded.is_integer() and abs(rounded) < 1e21 \
            else _js_float(rounded)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _js_float(value: float) -> str:
    text = repr(value)  # "1e-07" where JavaScript writes "1e-7"
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        text = f"{mantissa}e{sign}{int(exponent.lstrip('+-'))}"
    return text


def flatten(config: Any, prefix: str = "", out: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"model": {"lr": 0.1}} -> {"model/lr": 0.1}, as Tune's progress table names them."""
    out = {} if out is None else out
    if isinstance(config, dict):
        for key, value in config.items():
            name = prefix + str(key)
            if isinstance(value, dict) and value:
                flatten(value, name + "/", out)
            else:
                out[name] = value
    return out


# --- the columns ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Columns:
    hp_keys: list[str]  # the hyperparameter columns: keys that differ across trials first
    constants: dict[str, Any]  # keys the same in every trial, not given a column
    metrics: list[str]  # every metric any trial reported
    total: int


def columns_of(experiment: Experiment) -> Columns:
    stamp = Trial.objects.filter(experiment=experiment).aggregate(n=Count("id"), top=Max("id"))
    key = f"raywatch:trial-columns:{experiment.pk}:{stamp['n']}:{stamp['top']}"
    found = cache.get(key)
    if found is None:
        found = _columns(experiment)
        cache.set(key, found, timeout=COLUMNS_KEEP_S)
    return found


def _columns(experiment: Experiment) -> Columns:
    trials = Trial.objects.filter(experiment=experiment)
    values: dict[str, set[Any]] = {}  # a key's distinct values, up to two: do they differ
    present: dict[str, int] = {}
    sample: dict[str, Any] = {}
    total = 0
    for config in trials.values_list("config", flat=True).iterator(chunk_size=2000):
        total += 1
        for key, value in flatten(config).items():
            seen = values.get(key)
            if seen is None:
                seen = values[key] = set()
                sample[key] = value
                present[key] = 0
            present[key] += 1
            if len(seen) < 2:
                seen.add(_distinct(value))
    differ = sorted(k for k, seen in values.items() if len(seen) > 1 or present[k] < total)
    same = sorted(k for k in values if k not in differ)
    keys = (differ + same)[:MAX_HP_COLUMNS]
    return Columns(hp_keys=keys, constants={k: sample[k] for k in same if k not in keys},
                   metrics=_metric_names(trials), total=total)


def _distinct(value: Any) -> Any:
    """A value as a set member that tells 1 from 1.0 and True, as JSON does."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return (type(value).__name__, value)
    return json.dumps(value, sort_keys=True, default=str)


def _metric_names(trials: Any) -> list[str]:
    """Every metric any of the trials reported (the keys of their metric ranges)."""
    if connection.vendor == "postgresql":  # the keys only, not 10,000 JSON objects
        keys = Func(F("metric_range"), function="jsonb_object_keys", output_field=CharField())
        return sorted(trials.annotate(key=keys).values_list("key", flat=True).distinct()
                      .order_by())
    names: set[str] = set()
    for ranges in trials.values_list("metric_range", flat=True).iterator(chunk_size=2000):
        names.update(ranges or ())
    return sorted(names)


# --- the table -------------------------------------------------------------------------------

def trial_table(experiment: Experiment, query: TableQuery, now: datetime) -> dict[str, Any]:
    """One page of the experiment's trials by `query`, and what the page needs around it."""
    columns = columns_of(experiment)
    objective = objective_of(experiment, columns.metrics)
    metric = query.metric or objective.metric or (columns.metrics[0] if columns.metrics else "")
    mode = query.mode or (objective.mode if metric == objective.metric else guess_mode(metric))
    trials = Trial.objects.filter(experiment=experiment)
    if query.status:
        trials = trials.filter(status=query.status)
    firing = _health(experiment)
    if query.unhealthy:
        trials = trials.filter(pk__in=list(firing))
    order = _ordered(trials, query, metric, mode, firing, now)
    matched = len(order)
    pages = max(1, math.ceil(matched / query.page_size))
    page = min(query.page, pages)
    page_pks = order[(page - 1) * query.page_size: page * query.page_size]
    by_pk = {t.pk: t for t in Trial.objects.select_related("experiment").filter(pk__in=page_pks)}
    rows = trial_rows([by_pk[pk] for pk in page_pks if pk in by_pk],
                      objectives={experiment.pk: objective})
    return {
        "trials": rows, "matched": matched, "total": columns.total, "page": page,
        "pages": pages, "page_size": query.page_size, "hp_keys": columns.hp_keys,
        "constants": columns.constants, "metrics": _metric_list(columns.metrics, objective),
        "objective": objective.as_dict(), "metric": metric, "mode": mode,
        "query": {**query.as_dict(), "page": page}, "server_now": now,
    }


def _metric_list(metrics: list[str], objective: Objective) -> list[str]:
    names = set(metrics) | ({objective.metric} if objective.metric else set())
    return sorted(names, key=lambda n: (n != objective.metric, n))


def _health(experiment: Experiment) -> dict[int, str]:
    """Each unhealthy trial's firing incidents as its Health cell says them, worst first."""
    kinds: dict[int, set[str]] = {}
    for trial_id, kind in Incident.objects.filter(
            state=Incident.FIRING, kind__in=HEALTH_ORDER,
            trial__experiment=experiment).values_list("trial_id", "kind"):
        kinds.setdefault(trial_id, set()).add(kind)
    return {pk: ", ".join(HEALTH_NAMES[k] for k in HEALTH_ORDER if k in found)
            for pk, found in kinds.items()}


def _ordered(trials: Any, query: TableQuery, metric: str, mode: str, firing: dict[int, str],
             now: datetime) -> list[int]:
    """The matching trials' pks in the page's order: nulls last either way, ties by id."""
    fields = ["pk", "trial_id"]
    extra: dict[str, Any] = {}
    if query.sort in ("status", "iteration", "node_ip", "last_result_at"):
        fields.append(query.sort)
    elif query.sort == "step":
        fields += ["status", "last_result_at", "last_step_s"]
    elif query.sort == "best" and metric:
        extra["sort_value"] = JsonPath("metric_range", metric, 0 if mode == "min" else 1)
    elif query.sort == "last" and metric:
        extra["sort_value"] = JsonPath("last_metrics", metric)
    elif query.sort.startswith("hp:"):
        extra["sort_value"] = JsonPath("config", *query.sort[3:].split("/"))
    if query.text:
        fields += ["status", "node_ip", "hostname"]
    rows = list(trials.annotate(**extra).values(*dict.fromkeys(fields), *extra))
    if query.text:
        text = query.text.lower()
        configs = _config_texts(trials, rows)
        rows = [r for r in rows if text in _haystack(r, configs.get(r["pk"], ""), firing)]
    key = _sort_key(query.sort, firing, now)
    present = [r for r in rows if key(r) is not None]
    absent = [r for r in rows if key(r) is None]
    present.sort(key=lambda r: r["trial_id"])
    present.sort(key=lambda r: _comparable(key(r)), reverse=query.descending)
    absent.sort(key=lambda r: r["trial_id"])
    return [r["pk"] for r in present + absent]


def _sort_key(sort: str, firing: dict[int, str], now: datetime) -> Any:
    if sort == "step":
        def step(r: dict[str, Any]) -> float | None:
            done = r["last_step_s"]
            if r["status"] == Trial.RUNNING and r["last_result_at"] is not None:
                running = max(0.0, (now - r["last_result_at"]).total_seconds())
                if done is None or running > done:
                    return running
            return done
        return step
    if sort == "health":  # as the Health cell reads
        return lambda r: firing.get(r["pk"], "ok")
    if sort in ("best", "last") or sort.startswith("hp:"):
        return lambda r: r.get("sort_value")
    return lambda r: r.get(sort)


def _comparable(value: Any) -> tuple[int, Any]:
    """Numbers before text before anything else, so mixed values sort without failing."""
    if isinstance(value, bool):
        return (0, float(value))
    if isinstance(value, (int, float)):
        return (0, value if value == value else math.inf)
    if isinstance(value, str):
        return (1, value)
    if isinstance(value, datetime):
        return (0, value.timestamp())
    return (2, json.dumps(value, sort_keys=True, default=str))


def _haystack(row: dict[str, Any], config_text: str, firing: dict[int, str]) -> str:
    words = [row["trial_id"], row["status"], row["node_ip"], row["hostname"],
             firing.get(row["pk"], "ok")]
    return " ".join(w for w in words if w).lower() + " " + config_text


# A trial's config as the text filter matches it ("lr=0.001 model/arch=cnn"), by pk (with
# its trial_id, should a pk ever come back). A trial's config is written once, from its
# params.json (store.py), so what was read stays true and a filter typed into a
# 10,000-trial table reads only the configs it has not seen (each keystroke read and
# flattened every config: 0.16-0.4 s); an empty config is read again. Emptied when it
# grows past CONFIG_TEXTS_MAX.
_CONFIG_TEXTS: dict[int, tuple[str, str]] = {}
CONFIG_TEXTS_MAX = 200_000


def _config_texts(trials: Any, rows: list[dict[str, Any]]) -> dict[int, str]:
    known = {r["pk"]: hit[1] for r in rows
             if (hit := _CONFIG_TEXTS.get(r["pk"])) is not None and hit[0] == r["trial_id"]}
    missing = [r["pk"] for r in rows if r["pk"] not in known]
    if missing:
        if len(_CONFIG_TEXTS) + len(missing) > CONFIG_TEXTS_MAX:
            _CONFIG_TEXTS.clear()
        # Many missing: the matching trials' configs in one pass; a few: those only.
        found = trials if len(missing) > 1000 else Trial.objects.filter(pk__in=missing)
        for pk, trial_id, config in found.values_list("pk", "trial_id", "config").iterator(
                chunk_size=2000):
            if config:
                text = " ".join(f"{k}={shown(v)}" for k, v in flatten(config).items()).lower()
                _CONFIG_TEXTS[pk] = (trial_id, text)
                known[pk] = text
    return known
