"""The whole pipeline, step by step, with a report (see the package's text for the steps).

Sizes scale with ``scale`` (1.0: 4 producers × 25,000 events over 30 s, 100,000 LINEITEM rows). Every step
checks what it did and raises on a wrong answer; the run always unmounts what it mounted and
stops what it started, and writes ``report.json`` (with the failure, when one happened).
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

from tqdm import tqdm

from ...volume.errors import VolumeError
from . import lineitem, plots, snapshot_step, stack
from .events import EventPlan, Producers, expected_counts
from .replay import replay
from .stream import TABLE_SCHEMA, EventStream, totals

SEAL_SECONDS = 1.0


class PipelineError(VolumeError):
    """A step of the pipeline failed; the message names it."""


def _status(path: Path) -> dict:
    return json.loads(path.read_bytes())


STEPS = ("volumes", "spark_session", "lineitem_ingest", "produce_and_stream", "queries", "replay", "unmount", "fsck",
         "disk_time")
MARK = ".trax-demo"  # in every work folder this command made: only such a folder is ever replaced


def _prepare(work: Path) -> None:
    """A fresh work folder. An existing one is replaced only when an earlier run made it (its
    mark file is there) and nothing is mounted in it; any other non-empty folder is refused, so a
    mistyped ``--workdir`` never deletes a user's files."""
    if work.exists():
        if not work.is_dir():
            raise PipelineError(f"{work} exists and is not a folder")
        for line in Path("/proc/mounts").read_text().splitlines():
            point = line.split()[1]
            if point == str(work) or point.startswith(str(work) + "/"):
                raise PipelineError(f"{point} is mounted (a running traxfs?); unmount it first "
                                    f"(trax umount {point}) or choose another --workdir")
        if any(work.iterdir()):
            if not (work / MARK).exists():
                raise PipelineError(f"{work} is not empty and was not made by trax demo; choose a new or empty "
                                    "--workdir (the demo replaces its work folder)")
            shutil.rmtree(work)
    try:
        work.mkdir(parents=True, exist_ok=True)
        (work / MARK).write_text("made by trax demo; the next run replaces this folder\n")
    except OSError as e:
        raise PipelineError(f"cannot use the work folder {work}: {e.strerror}") from None


class Sampler:
    """Samples appended and consumed record counts twice a second, for the lag over time."""

    def __init__(self, qdir: Path, stream: EventStream, t0: float):
        self.qdir, self.stream, self.t0 = qdir, stream, t0
        self.appended: list[tuple[float, int]] = []
        self.consumed: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pipeline-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            t = round(time.monotonic() - self.t0, 2)
            try:
                self.appended.append((t, _status(self.qdir / "status.json")["records"]))
            except OSError:
                continue
            self.consumed.append((t, self.stream.processed))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run(workdir: str | Path, scale: float = 1.0, master: str | None = None, seed: int = 1,
        progress: bool = True) -> dict:
    work = Path(workdir).resolve()
    _prepare(work)
    home, mnt = work / "home", work / "mnt"
    report: dict = {"workdir": str(work), "scale": scale, "seed": seed, "steps": {}, "checks": {}}
    steps = report["steps"]
    plan = EventPlan(seed=seed, producers=4, per_producer=max(1000, int(25_000 * scale)),
                     seconds=max(5.0, 30.0 * min(1.0, scale)))
    items = max(2000, int(100_000 * scale))
    t_run = time.monotonic()

    overall = tqdm(total=len(STEPS), desc="pipeline", unit="step", disable=not progress,
                   bar_format="pipeline {n}/{total} steps |{bar}| {elapsed} {desc}")

    def timed(name: str, fn, *args, **kw):
        """Run one step: its time in the report, its name on the progress bar."""
        overall.set_description(name.replace("_", " "))
        t0 = time.monotonic()
        out = fn(*args, **kw)
        steps.setdefault(name, {})["seconds"] = round(time.monotonic() - t0, 2)
        overall.update(1)
        return out

    mounted = False
    try:
        built = timed("volumes", stack.build, home, work, "1G")
        steps["volumes"].update(built)
        stack.mount(home, mnt)
        mounted = True
        _run_on_mount(mnt, plan, items, master, report, timed, progress)
        timed("unmount", stack.umount, home, mnt)
        mounted = False
        fsck = timed("fsck", stack.fsck, home)
        steps["fsck"]["counts"] = fsck.get("counts")
        report["checks"]["fsck clean"] = True
        from ...volume.registry import Registry
        from .disk_time import analyse

        report["disks"] = timed("disk_time", analyse, Registry(home), stack.VG, stack.LV)
        report["plots"] = plots.draw_all(report, work / "plots")
        report["ok"] = True
    except Exception as e:  # any failure, Spark's included, ends the run with the step's message
        report["ok"] = False
        report["error"] = f"{type(e).__name__}: {e}"
        if isinstance(e, PipelineError):
            raise
        raise PipelineError(f"the pipeline failed: {type(e).__name__}: {e}") from e
    finally:
        if mounted:
            try:
                stack.umount(home, mnt)
            except VolumeError as e:
                report.setdefault("cleanup_errors", []).append(str(e))
        overall.close()
        report["seconds"] = round(time.monotonic() - t_run, 1)
        (work / "report.json").write_text(json.dumps(report, indent=2, default=str))
    return report


def _run_on_mount(mnt: Path, plan: EventPlan, items: int, master: str | None, report: dict, timed,
                  progress: bool) -> None:
    from ..spark_job import session, stop

    steps, checks = report["steps"], report["checks"]
    qdir, counts_table = mnt / "queues" / "events", mnt / "tables" / "event_counts"
    qdir.mkdir()
    (qdir / "config.json").write_text(json.dumps({"seal_seconds": SEAL_SECONDS}))
    counts_table.mkdir()
    (counts_table / "schema").write_text(TABLE_SCHEMA + "\n")
    (mnt / "pipeline").mkdir()
    spark = timed("spark_session", session, **({"master": master} if master else {}))
    try:
        steps["lineitem_ingest"] = timed("lineitem_ingest", lineitem.ingest, spark, mnt, items)
        stream = EventStream(spark, qdir / "segments", counts_table, mnt / "pipeline" / "checkpoint")
        run = timed("produce_and_stream", _produce_and_stream, qdir, stream, plan, progress, spark, mnt)
        logs, t0, marks, sampler = run["logs"], run["t0"], run["marks"], run["sampler"]
        snap = run["snapshot"]
        snap["after_writers"] = snapshot_step.python_counts(mnt, snap["name"])
        snapshot_step.check(snap["during_writers"], snap["after_writers"], plan.total)
        steps["snapshot"] = snap
        checks["a snapshot taken under writers reads the same in Spark during and without Spark after"] = True
        append_s = max(t0p - t0 + log[-1][0] for t0p, log in logs.values())
        steps["produce"] = {"producers": plan.producers, "events": plan.total, "seconds": round(append_s, 2),
                            "events_per_s": round(plan.total / append_s)}
        steps["stream"] = {"micro_batches": len(stream.rows_by_batch), "starts": stream.starts,
                           "replayed_batches": stream.replayed, "seconds": round(stream.log[-1][0] - t0, 2)}
        got, want = totals(counts_table / "rows.csv"), expected_counts(plan)
        if got != want:
            bad = [k for k in set(got) | set(want) if got.get(k) != want.get(k)][:5]
            raise RuntimeError(f"event_counts differs from the generator's totals, e.g. "
                               f"{[(k, got.get(k), want.get(k)) for k in bad]}")
        checks["stream totals equal the generator's, exactly once"] = True
        status = _status(counts_table / "status.json")
        steps["stream"].update({"table_rows": status["rows"], "buckets": len(want), "table_ingests": status.get("ingests")})
        report["queries"] = timed("queries", lineitem.queries, spark, mnt, items)
        checks["Q1 and Q6 equal the pure-Python answers"] = True
        steps["replay"] = timed("replay", replay, qdir, time.time() - 30)
        checks["replay view read its window and caught up to live"] = True
        report["timeline"] = {"appended": _merge_logs(logs, t0), "consumed": [(round(t - t0, 2), n) for t, n in stream.log],
                              "lag": _lag(sampler.appended, sampler.consumed), "marks": marks}
    finally:
        stop(spark)


def _produce_and_stream(qdir: Path, stream: EventStream, plan: EventPlan, progress: bool, spark, mnt: Path) -> dict:
    """Producers append while the stream consumes; the stream is stopped and restarted from its
    checkpoint once it has 40% of the events, and a snapshot is taken once half the events are
    appended (the producers wait there for it, then go on appending) and read by Spark at once;
    returns when the stream has every event."""
    stream.start()
    producers = Producers(qdir, plan)
    t0 = time.monotonic()
    marks: list[tuple[float, str]] = []
    snap: dict = {}
    with Sampler(qdir, stream, t0) as sampler:
        producers.start()
        try:
            bar = tqdm(total=plan.total, desc="events streamed", unit="rec", disable=not progress, leave=False)
            restarted = False
            while stream.processed < plan.total or not restarted or not snap:
                if not restarted and stream.processed >= plan.total * 0.4:
                    stream.stop()
                    marks.append((round(time.monotonic() - t0, 2), "stream stopped and restarted"))
                    stream.start()
                    restarted = True
                appended = sampler.appended[-1][1] if sampler.appended else 0
                if not snap and appended >= plan.total // 2:
                    if not producers.alive():
                        raise RuntimeError("the producers finished before the snapshot could be taken under them")
                    snap.update(snapshot_step.take(mnt, "mid-run"))
                    producers.release()  # held halfway until now: they append while Spark reads it
                    marks.append((round(time.monotonic() - t0, 2), "snapshot mid-run"))
                    snap["during_writers"] = snapshot_step.spark_counts(spark, mnt, "mid-run")
                bar.update(stream.processed - bar.n)
                if (err := stream.failure()):
                    raise RuntimeError(f"the streaming query failed: {err}")
                if time.monotonic() - t0 > 600:
                    raise TimeoutError(f"the stream processed {stream.processed} of {plan.total} events in 600 s")
                time.sleep(0.3)
            bar.update(stream.processed - bar.n)
            bar.close()
            logs = producers.join()
        except BaseException:
            producers.kill()
            stream.stop()
            raise
        stream.wait_for(plan.total, timeout=120)
        stream.stop()
    return {"logs": logs, "t0": t0, "marks": marks, "sampler": sampler, "snapshot": snap}


def _merge_logs(logs: dict, t0: float) -> list[tuple[float, int]]:
    """All producers' (time, appended) logs as one cumulative series since ``t0``."""
    events = sorted((round(start - t0 + t, 2), n - prev) for start, log in logs.values()
                    for (t, n), prev in zip(log, [0] + [n for _, n in log], strict=False))
    out, total = [(0.0, 0)], 0
    for t, d in events:
        total += d
        out.append((t, total))
    return out


def _lag(appended: list, consumed: list) -> list[tuple[float, int]]:
    return [(t, max(0, a - c)) for (t, a), (_, c) in zip(appended, consumed, strict=False)]


def summary(report: dict) -> str:
    """The report as text, for a person."""
    s = report["steps"]
    v = s["volumes"]
    q = v["quadrangle"]
    lines = [f"volumes: {v['disks']} simulated Atlas 10K III disks, geometry extracted by probing "
             f"({v['extraction']['probes']} timed reads, exact), quadrangle volume {v['volume']} "
             f"(p={q['p']}, w={q['w']}, d={q['d']}, b={q['b']}) — {v['seconds']} s"]
    p, st, li = s["produce"], s["stream"], s["lineitem_ingest"]
    lines.append(f"queue: {p['producers']} producers appended {p['events']:,} events in {p['seconds']} s "
                 f"({p['events_per_s']:,}/s)")
    lines.append(f"stream: {st['micro_batches']} micro-batches, {st['starts']} starts (restarted from its checkpoint), "
                 f"replayed batches {st['replayed_batches'] or 'none'}; {st['buckets']} (minute, key) totals equal "
                 f"the generator's")
    lines.append(f"lineitem: {li['rows']:,} rows ingested by a Spark batch job in {li['spark_ingest_s']} s "
                 f"({li['rows_per_s']:,} rows/s; {li['placement']})")
    for name, r in report["queries"].items():
        pr, rc = r["projection"], r["rows.csv"]
        lines.append(f"{name}: answer checked; projection ({len(r['columns'])} columns) {pr['wall_s']} s, "
                     f"{pr['volume_bytes_read'] / 2**20:.1f} MiB from the volume; rows.csv {rc['wall_s']} s, "
                     f"{rc['volume_bytes_read'] / 2**20:.1f} MiB")
    sn = s["snapshot"]
    d = sn["during_writers"]
    lines.append(f"snapshot {sn['name']}: taken in {sn['create_ms']} ms under the writers; Spark read its table "
                 f"({d['table_rows']} rows, {d['table_events']:,} events) and {d['segment_records']:,} queue records "
                 f"while they went on — the same after they stopped")
    r = s["replay"]
    lines.append(f"replay: {r['history_records']:,} records of history in {r['replay_s']} s, then "
                 f"{r['live_records']} live ones; lag 0 after commit")
    if report.get("disks"):
        for label, sc in report["disks"]["scans"].items():
            lines.append(f"disk time, {label}: {sc['elapsed_ms']:.1f} ms elapsed (seek {sc['seek']:.1f}, rotation "
                         f"{sc['rotation']:.1f}, switches {sc['switches']:.1f}, transfer {sc['transfer']:.1f} ms "
                         f"over the disks; {sc['volume_bytes'] / 2**20:.1f} MiB)")
    lines.append(f"unmounted; fsck clean. {len(report['checks'])} checks passed in {report['seconds']} s")
    lines += [f"plot: {p}" for p in report.get("plots", [])]
    return "\n".join(lines)
