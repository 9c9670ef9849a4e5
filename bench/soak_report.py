"""The soak's report, as text, from its result (``python bench/NAME.py`` finds this module
next to it): the figures at each day's end, what the broker holds inside beside the
plain-Flux control's, the growth once warm with met or MISSED, the promises."""

from __future__ import annotations

from typing import Any

from benchlib import verdict
from soak_growth import BOUNDED, FLAT, arena_kb, day_ends, flat_verdicts, largest_arenas

# Descriptor kinds (``soak.fd_kinds``); "tcp" are the connection pools' sockets.
FD_KINDS = ("tcp", "unix", "pipe", "anon", "file", "socket")
# What the broker holds, by column: (heading, where, key) at each day's end.
INSIDE_COLUMNS = (
    ("RSS", "broker", "mem_rss"),
    ("anon", "broker", "mem_anon"),
    ("heap", "broker", "mem_heap"),
    ("arenas", "broker", "mem_arenas"),
    ("jm act", "broker", "jm_active"),
    ("jm inact", "broker", "jm_inactive"),
    ("job-list", "broker", "job_list_jobs"),
    ("kvs objs", "broker", "kvs_cache_count"),
    ("jobdir ents", "broker", "kvs_job_dir_entries"),
    ("jobdir B", "broker", "kvs_job_dir_bytes"),
    ("cache objs", "broker", "content_cache_count"),
    ("store objs", "broker", "content_store_objects"),
    ("sched", "broker", "sched_jobs"),
)
CONTROL_COLUMNS = (
    ("RSS", "control", "mem_rss"),
    ("anon", "control", "mem_anon"),
    ("heap", "control", "mem_heap"),
    ("arenas", "control", "mem_arenas"),
    ("jm inact", "control", "jm_inactive"),
    ("KVS kB", "control", "kvs_cache_kb"),
    ("jobdir ents", "control", "kvs_job_dir_entries"),
    ("jobdir B", "control", "kvs_job_dir_bytes"),
    ("content B", "control", "content_cache_bytes"),
    ("store objs", "control", "content_store_objects"),
    ("jobs", "control", "submitted"),
)


def fd_lines(samples: list[dict[str, Any]]) -> list[str]:
    """The service's descriptors by kind over every sample: the least and most of
    each, and what ``held`` and ``tcp`` mean."""
    kinds = [s["service_fd_kinds"] for s in samples if s.get("service_fd_kinds")]
    if not kinds:
        return []
    spans = ", ".join(
        f"{kind} {min(k[kind] for k in kinds)}..{max(k[kind] for k in kinds)}" for kind in FD_KINDS
    )
    return [
        f"service descriptors by kind over {len(kinds)} samples (least..most): {spans}",
        "  held = every descriptor but the TCP sockets (files, pipes, Unix sockets to the",
        "  broker, event descriptors): what a leak grows. tcp = the HTTP connection pools'",
        "  connections to the vendors' endpoints, opened and closed with the requests in",
        "  flight when the sample is taken, bounded by the pools' size.",
    ]


def table(ends: list[dict[str, Any]], columns: tuple[tuple[str, str, str], ...]) -> list[str]:
    """One row a day of ``columns`` (heading, where, key); [] if none was sampled."""
    if not any(s.get(where) for s in ends for _, where, _ in columns):
        return []
    widths = [max(len(head), 9) for head, _, _ in columns]
    lines = ["day " + " ".join(f"{h:>{w}}" for (h, _, _), w in zip(columns, widths, strict=True))]
    for s in ends:
        cells = []
        for (_, where, key), width in zip(columns, widths, strict=True):
            value = (s.get(where) or {}).get(key)
            cells.append(f"{'-' if value is None else value:>{width}}")
        lines.append(f"{s['day_end']:>3} " + " ".join(cells))
    return lines


def arena_table(ends: list[dict[str, Any]], where: str) -> list[str]:
    """kB held by the largest malloc arenas at ``where`` at each day's end, named by the
    threads (the broker's modules) that allocate from them, and by all the others."""
    names = largest_arenas(ends, where)
    if not names:
        return []
    widths = [max(len(name), 9) for name in names]
    lines = [
        "day " + " ".join(f"{n:>{w}}" for n, w in zip(names, widths, strict=True)) + "     other"
    ]
    for s in ends:
        held = (s.get(where) or {}).get("arenas_kb") or {}
        other = sum(v for k, v in held.items() if k not in names)
        cells = [f"{arena_kb(s, where, n):>{w}.0f}" for n, w in zip(names, widths, strict=True)]
        lines.append(f"{s['day_end']:>3} " + " ".join(cells) + f" {other:>9}")
    return lines


def inside_lines(result: dict[str, Any]) -> list[str]:
    """What the two brokers hold at each day's end, their plateaus and where they grow."""
    ends = day_ends(result["samples"])
    lines = [
        "",
        "inside the soak's broker at each day's end (memory in kB: RSS; anon = what malloc",
        "holds; heap = the main arena; arenas = the threads' malloc arenas and other private",
        "anonymous maps; jm = the job-manager's jobs; job-list's jobs; KVS cache objects;",
        "jobdir = the KVS's job.AAAA directories' entries, the largest's bytes; content",
        "cache and content store objects; sched = the scheduler's queued/running jobs):",
        *table(ends, INSIDE_COLUMNS),
    ]
    control = table(ends, CONTROL_COLUMNS)
    if control:
        lines += [
            "",
            "the plain-Flux control at the same moments (every job of the soak's instance",
            "copied, command `true`, into an instance without the plugin, the same purge):",
            *control,
        ]
    for where, name in (("broker", "the soak's broker"), ("control", "the control's broker")):
        arenas = arena_table(ends, where)
        if arenas:
            lines += [
                "",
                f"{name}: kB its largest malloc arenas hold from the system at each day's end",
                "(glibc's system_mem read by gdb; named by the module threads allocating",
                "from each; a Flux message is freed in the arena of the thread that made it):",
                *arenas,
            ]
    lines.append("")
    for where, name in (("broker_plateau", "soak's broker"), ("control_plateau", "control")):
        p = result.get(where)
        if not p:
            continue
        stops = (
            f"stops growing on day {p['plateau_day']} (<= 1 %/day from then), "
            f"{p['plateau_kb']:,} kB from then on"
            if p["plateau_day"]
            else "does not stop growing in the run"
        )
        full = p["content_cache_full_day"]
        lines.append(
            f"  {name:14} RSS {p['first_kb']:,.0f} kB on day 1, {p['last_kb']:,.0f} kB at the "
            f"end; {stops}; content cache full from day {full if full else '- (never)'}"
        )
    inside = result.get("growth_inside_broker") or {}
    if inside:
        lines.append(f"  growth per day from day {result['warm_day']}, by kind of memory:")
        lines += [
            f"    {key:22} {'n/a' if pct is None else f'{pct:+.2f} %/day'}"
            for key, pct in inside.items()
        ]
    return lines


def growth_lines(result: dict[str, Any]) -> list[str]:
    verdicts = flat_verdicts(result)
    lines = [
        "",
        f"warm from {result['warm_rule']};",
        f"growth per day from day {result['warm_day']}, least-squares slope / mean:",
    ]
    if result.get("quick"):
        lines.insert(
            1,
            f"(a quick run: {result['days']} days are too few to judge growth, and its exit "
            "status says only whether anything was lost; the full run judges both)",
        )
    for key, pct in result["growth"].items():
        shown = "n/a (fewer than 2 warm days)" if pct is None else f"{pct:+.2f} %/day"
        if key in BOUNDED:
            lines.append(f"  {key:22} {shown}  (noisy; judged by its bound below)")
        elif key in FLAT:
            ok = verdicts[key]
            shown += "" if ok is None else f"  ({verdict(ok)})"
            lines.append(f"  {key:22} {shown} target <= 1 %/day")
        else:
            lines.append(f"  {key:22} {shown} (history by design)")
    bound = result.get("kvs_cache_bound")
    if bound:
        lines.append(
            f"  kvs_cache_kb           highest {bound['first_half_max_kb']:,.1f} kB over the "
            f"run's first half, {bound['second_half_max_kb']:,.1f} kB over the second "
            f"({verdict(bound['bounded'])}: target no higher)"
        )
    day2 = result.get("growth_from_day_2") or {}
    if day2 and result["warm_day"] != 2:
        lines.append("  said beside, from day 2 (the rule before the control):")
        lines += [
            f"    {key:20} {'n/a' if pct is None else f'{pct:+.2f} %/day'}"
            for key, pct in day2.items()
            if key not in BOUNDED
        ]
    per_job = result.get("history_bytes_per_job", {})
    for key, value in per_job.items():
        lines.append(f"  {key:22} {value:,.0f} bytes per job")
    return lines


def job_dir_line(result: dict[str, Any]) -> list[str]:
    unlinked = result.get("job_dirs_unlinked")
    if unlinked is None:
        return []
    where = ", ".join(
        f"{n:,} in the {name}"
        for n, name in zip(unlinked, ("soak's instance", "control's"), strict=False)
    )
    return [
        "KVS job directories pruned (--prune-job-dirs, what a real week's clock does: a new",
        f"job.AAAA every 4.66 h): the entries purged jobs left unlinked, {where}",
    ]


def report(result: dict[str, Any]) -> str:
    ends = day_ends(result["samples"])
    first = [s for s in result["samples"] if s["day_end"] == 0]
    age = result.get("purge_age_s")
    purged = (
        "no purging (--no-purge): Flux keeps every inactive job"
        if age is None
        else f"inactive jobs purged after {age:g} s ([job-manager] inactive-age-limit); "
        f"{result['jobs_kept']} jobs' records kept before their purge, "
        f"{len(result['jobs_lost_to_purge'])} purged before kept (target 0)"
    )
    lines = [
        f"soak of {result['revision']}: {result['days']} simulated days at vendor clock "
        f"x{result['speed']:g} ({result['wall_s'] / 60:.1f} min of wall time), "
        f"{result['submissions']} submissions, {result['qpu_jobs']} qpu jobs",
        purged,
        *job_dir_line(result),
        "",
        f"{'day':>3} {'svc RSS kB':>10} {'fds':>4} {'held':>4} {'tcp':>4} {'thr':>4} "
        f"{'broker RSS kB':>13} {'KVS cache kB':>12} {'content B':>10} {'ledger B':>10} "
        f"{'store B':>10} {'jobs':>5} {'in Flux':>7}",
    ]
    for s in first + ends:
        kinds = s.get("service_fd_kinds") or {}
        lines.append(
            f"{s['day_end']:>3} {s['service_rss_kb'] or 0:>10} {s['service_fds'] or 0:>4} "
            f"{s.get('service_fds_held') or 0:>4} {kinds.get('tcp', 0):>4} "
            f"{s['service_threads'] or 0:>4} {s['broker_rss_kb'] or 0:>13} "
            f"{s['kvs_cache_kb']:>12} {s['content_cache_bytes'] or 0:>10} "
            f"{s['ledger_bytes']:>10} {s['content_store_bytes']:>10} {s['jobs']:>5} "
            f"{s.get('jobs_in_flux', 0):>7}"
        )
    lines += ["", *fd_lines(result["samples"])]
    lines += inside_lines(result)
    lines += growth_lines(result)
    control = result.get("broker_kb_per_job_control") or {}
    if control:
        lines += [
            "",
            "broker RSS growth per job, control instances (_purged: inactive jobs purged):",
        ]
        lines += [f"  {key:30} {value:8.1f} kB per job" for key, value in control.items()]
    lines += ["", "promises over the whole run (target 0 each):"]
    for name, count in result["violations"].items():
        lines.append(f"  {name:16} {'-' if count is None else count}")
    if result["errors"]:
        lines += ["", "campaign errors:", *[f"  {e}" for e in result["errors"][:20]]]
    return "\n".join(lines) + "\n"
