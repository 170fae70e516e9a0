#!/usr/bin/env python3
"""Checks a /metrics text (stdin) by the book, with the prometheus_client
text parser and the rules it does not enforce: every family has HELP and
TYPE, given once, before its samples, which stand together; histograms
have cumulative buckets in increasing `le` order ending at +Inf, `_count`
equal to the +Inf bucket, and `_sum`; every family is in the table of
docs/METRICS.md (argv[1]) with the same type, or is a process_* family.

Exits 1 with every violation listed, 0 if none."""
import math
import re
import sys
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

PROCESS = {
    "process_cpu_seconds_total": "counter",
    "process_resident_memory_bytes": "gauge",
    "process_virtual_memory_bytes": "gauge",
    "process_virtual_memory_max_bytes": "gauge",
    "process_open_fds": "gauge",
    "process_max_fds": "gauge",
    "process_start_time_seconds": "gauge",
    "process_threads": "gauge",
}


def documented(path):
    text = open(path, encoding="utf-8").read()
    rows = re.findall(r"^\| `([a-z_]+)` \| (counter|gauge|histogram) \|", text, re.M)
    return dict(rows) | PROCESS


def family_of(sample, types):
    """The family a sample line belongs to, by the declared TYPEs."""
    if sample in types:
        return sample
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        base = sample.removesuffix(suffix)
        if base != sample and types.get(base) in ("histogram", "summary", "counter"):
            return base
    return sample


def raw_checks(text, errors):
    helps, types, seen_done, current = set(), {}, set(), None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.match(r"# (HELP|TYPE) (\S+)(?: (.*))?$", line)
        if m:
            kind, name, rest = m.groups()
            if kind == "HELP":
                if name in helps:
                    errors.append(f"line {n}: a second HELP for {name}")
                if not (rest or "").strip():
                    errors.append(f"line {n}: empty HELP for {name}")
                helps.add(name)
            else:
                if name in types:
                    errors.append(f"line {n}: a second TYPE for {name}")
                types[name] = rest
            continue
        if line.startswith("#"):
            continue
        sample = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
        fam = family_of(sample, types)
        if fam not in types:
            errors.append(f"line {n}: {sample} has no TYPE before it")
        if fam not in helps:
            errors.append(f"line {n}: {sample} has no HELP before it")
        if fam != current:
            if fam in seen_done:
                errors.append(f"line {n}: samples of {fam} do not stand together")
            if current is not None:
                seen_done.add(current)
            current = fam


def histogram_checks(f, errors):
    series = defaultdict(lambda: {"buckets": [], "sum": None, "count": None})
    for s in f.samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        if s.name == f.name + "_bucket":
            series[key]["buckets"].append((s.labels["le"], s.value))
        elif s.name == f.name + "_sum":
            series[key]["sum"] = s.value
        elif s.name == f.name + "_count":
            series[key]["count"] = s.value
        else:
            errors.append(f"{f.name}: unexpected sample {s.name}")
    for key, h in series.items():
        les = [float(le) for le, _ in h["buckets"]]
        counts = [v for _, v in h["buckets"]]
        where = f"{f.name}{dict(key)}"
        if not les or les[-1] != math.inf:
            errors.append(f"{where}: the last bucket is not le=+Inf")
        if les != sorted(les) or len(set(les)) != len(les):
            errors.append(f"{where}: le out of order or repeated: {les}")
        if counts != sorted(counts):
            errors.append(f"{where}: bucket counts not cumulative: {counts}")
        if h["sum"] is None or h["count"] is None:
            errors.append(f"{where}: no _sum or _count")
        elif counts and h["count"] != counts[-1]:
            errors.append(f"{where}: _count {h['count']} is not the +Inf bucket {counts[-1]}")


def main():
    text = sys.stdin.read()
    known = documented(sys.argv[1])
    errors = []
    raw_checks(text, errors)
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as e:  # the parser refuses the text outright
        print(f"check-metrics: the parser refused the text: {e}")
        return 1
    for f in families:
        if not f.documentation:
            errors.append(f"{f.name}: no HELP")
        if f.type == "unknown":
            errors.append(f"{f.name}: no TYPE")
        # The parser names a counter family without its _total.
        name = f.name + "_total" if f.type == "counter" and f.name + "_total" in known else f.name
        if name not in known:
            errors.append(f"{name} ({f.type}) is not in docs/METRICS.md")
        elif known[name] != f.type:
            errors.append(f"{name}: type {f.type}, docs/METRICS.md says {known[name]}")
        if f.type == "histogram":
            histogram_checks(f, errors)
        if f.type == "counter" and any(s.value < 0 for s in f.samples):
            errors.append(f"{name}: a negative counter")
    for e in errors:
        print(f"check-metrics: {e}")
    print(f"check-metrics: {len(families)} families, {len(errors)} violations")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
