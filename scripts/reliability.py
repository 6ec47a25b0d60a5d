#!/usr/bin/env python3
"""Puts the figures the hardening tests and benchmarks measured into docs/reliability.md.

The e2e tests write target/reliability/NAME.json (test_hardening.py, test_soak.py,
test_fleet.py: fleet.json, one section per test); the
pipeline benchmark writes target/bench/pipeline.json (the flood_room and flood_full rows).
This script rewrites the part of docs/reliability.md between the `measured:begin` and
`measured:end` markers with them, so the document shows the last run's figures:

    python3 scripts/reliability.py            # rewrite the section
    python3 scripts/reliability.py --check    # exit 1 if the section is not what the files say
"""
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"


def load(name):
    p = REPO / "target" / "reliability" / f"{name}.json"
    return json.loads(p.read_text()) if p.exists() else None


def flood_rows():
    p = REPO / "target" / "bench" / "pipeline.json"
    if not p.exists():
        return []
    rows = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    return [r for r in rows if r["name"].startswith("flood_")]


def section():
    out = ["| test | what was tried | figures |", "|---|---|---|"]
    n = load("neighbour_poisoning")
    if n:
        out.append(
            "| neighbour poisoning (`test_hardening.py`) | "
            f"{n['forged_answers']} forged ARP replies and gratuitous ARPs for a backend's address, "
            "then the backend really moving to a new MAC | "
            f"ignored and counted: {n['ignored_conflict']}; table changes: "
            f"{n['table_changes_from_forgery']}; frames to the forger: {n['frames_to_forger']}; "
            f"flows answered meanwhile: {n['flows_answered_during_forgery']}/48; the move picked "
            f"up in {n['move_picked_up_s']} s, then {n['flows_answered_after_move']}/48 answered |")
    for r in flood_rows():
        x = r  # the row's extra fields are top-level keys
        out.append(
            f"| SYN flood, `{r['name']}` (pipeline benchmark) | {x['established_flows']:,} "
            f"established flows, then 95% SYNs from random sources flat out, flood guard "
            f"{x['guard_per_sec']:,}/s, table {x['capacity']:,} entries "
            f"({x['entries_before_flood']:,} used before the flood) | "
            f"established hit share alone before {x['before_hit_share'] * 100:.3f}%, after "
            f"{x['after_hit_share'] * 100:.3f}%; evictions {r['evictions']}; bypassed "
            f"{r['bypassed']:,}; worker {x['before_mpps']:.2f} Mpps before, "
            f"{x['flood_mpps']:.2f} during ({x['flood_over_before'] * 100:.0f}%) |")
    o = load("syn_flood_outside")
    if o:
        out.append(
            "| SYN flood from outside (`test_hardening.py`) | `spillway-gen` on the segment: "
            f"{o['flood_sent']:,} new connections from random sources at {o['flood_rate_pps']:,}/s "
            "against a 4,096-entry table with the guard at 1,000/s, 200 established client "
            "flows meanwhile | "
            f"evictions {o['evictions']:.0f}; bypassed {o['bypassed']:,.0f}; established: "
            f"{o['established_rounds']} rounds, lost {o['established_lost']}, moved "
            f"{o['established_moved']} |")
    s = load("reload_storm")
    if s:
        out.append(
            f"| reload storm (`test_hardening.py`) | {s['reloads']} reloads (a backend removed "
            "and re-added within its draining time, weights, idle timeout) under 1,000 + 200 "
            "established UDP flows and new flows | "
            f"moved {s['moved']}, lost {s['lost']} (background: {s['background']['rounds']} "
            f"rounds, lost {s['background']['lost']}, moved {s['background']['moved']}); new "
            f"flows on the removed backend {s['new_on_removed']}; snapshots published "
            f"{s['published']:.0f}, reclaimed {s['reclaimed']:.0f}, retained {s['retained']:.0f}; "
            f"RSS {s['rss_kib_before']} -> {s['rss_kib_after']} KiB; request to every worker "
            f"using it: p50 {s['latency_ms_p50']} ms, p99 {s['latency_ms_p99']} ms (the API "
            f"answers in {s['api_ms_p50']} ms) |")
    k = load("soak")
    if k:
        out.append(
            f"| soak (`test_soak.py`) | {k['seconds']:.0f} s: generator traffic, client flows, "
            f"{k['flaps']} health flaps, {k['reloads']} reloads, a slow admin client | "
            f"no exit; rx {k['rx']:,} = accounted {k['accounted']:,}; client flows "
            f"{k['client_flows']:,}, lost {k['client_lost']}; RSS {k['rss_kib_warm']} -> max "
            f"{k['rss_kib_max']} KiB after warm-up; fds {k['fds_first']} -> max {k['fds_max']}; "
            f"conntrack max {k['conntrack_max']:,.0f}; health changes {k['health_changes']:.0f} |")
    out.extend(fleet_rows())
    return "\n".join(out)


def fleet_rows():
    """The fleet (test_fleet.py): instances behind a BIRD router with ECMP."""
    f = load("fleet") or {}
    out = []
    for kind, how in (("death_bfd", "BFD 100 ms x 3"), ("death_hold_time", "BGP hold time 3 s")):
        d = f.get(kind)
        if d:
            out.append(
                f"| fleet: an instance killed (`kill -9`), {how} (`test_fleet.py`) | "
                f"{d['connections']} long-lived TCP connections, a message every 100 ms, "
                f"{d['on_killed_instance']} through the killed instance | router FIB without it "
                f"after {d['router_fib_without_killed_s']} s; every connection answered again "
                f"after {d['all_connections_answered_again_s']} s; longest stall "
                f"{d['longest_stall_s']:.2f} s; resets {d['resets']}, backends changed "
                f"{d['backends_changed']}, lost {d.get('lost', 'n/a')} of {d.get('sent', 'n/a')} |")
    d = f.get("drain")
    if d:
        out.append(
            "| fleet: `drain-instance --wait`, undrain, drain, SIGTERM (`test_fleet.py`) | "
            f"{d['connections']} long-lived connections, {d['on_drained_instance']} through the "
            f"drained instance | router FIB without it after {d['drain_to_router_fib_without_s']} "
            f"s, `--wait` returned after {d['drain_wait_returned_s']} s; SIGTERM exit "
            f"{d['exit_code']} after {d['sigterm_exit_s']} s; lost {d['lost']} of {d['sent']}, "
            f"resets {d['resets']}, backends changed {d['backends_changed']}, longest stall "
            f"{d['longest_stall_s']:.2f} s |")
    d = f.get("restart")
    if d:
        out.append(
            "| fleet: the killed instance restarted (`test_fleet.py`) | health checks every 2 s, "
            f"healthy after 2 in a row; {d['connections_moved_onto_restarted']} connections moved "
            f"onto it by ECMP | announced only once serving ({d['first_serving_s']} s after the "
            f"start; nothing in its table, BIRD or the router before); resets {d['resets']}, "
            f"backends changed {d['backends_changed']}, lost {d['lost']} |")
    d = f.get("withdraw_on_empty")
    if d:
        out.append(
            "| fleet: every backend of a service unhealthy (`test_fleet.py`) | its health port "
            f"blocked on every backend, {d['instances']} instances | its VIP gone from the router "
            f"after {d['router_fib_without_s']} s, back {d['recovered_to_router_fib_s']} s after a "
            f"backend recovered; the other VIP's route changed {d['router_fib_web_changes']} times |")
    d = f.get("bird_stopped")
    if d:
        out.append(
            "| fleet: an instance's BIRD stopped, restarted (`test_fleet.py`) | "
            f"{d['connections']} long-lived connections | Spillway noticed in "
            f"{d['spillway_noticed_bird_down_s']} s and kept forwarding "
            f"({d['forwarded_without_bird']}/10 requests forced through it answered); router FIB "
            f"back {d['bird_restart_to_router_fib_s']} s after BIRD's restart; lost {d['lost']}, "
            f"resets {d['resets']} |")
    d = f.get("exception_path")
    if d:
        ll = d.get("long_lived_during_flood", {})
        out.append(
            "| fleet: a UDP flood of the node's address (`test_fleet.py`) | "
            f"{d['flood_senders']} senders, {d['flood_frames_sent']:,} frames in "
            f"{d['flood_seconds']:.0f} s ({d['flood_pps']:,}/s) | to the kernel "
            f"{d['flood_to_kernel']:,}, dropped kernel_busy {d['flood_kernel_busy']:,} and at the "
            f"kernel interface {d['flood_to_kernel_dropped']:,}; long-lived connections during "
            f"it: {ll.get('answered')}/{ll.get('sent')} answered, resets {ll.get('resets')}, "
            f"longest stall {ll.get('longest_stall_s', 0):.2f} s; BGP {d['bgp']}, BFD {d['bfd']} |")
    return out


def main():
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{section()}\n{END}{tail}"
    if "--check" in sys.argv:
        if new != text:
            sys.exit("docs/reliability.md: the measured section differs from target/ (run scripts/reliability.py)")
        return
    DOC.write_text(new)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
