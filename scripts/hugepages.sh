#!/usr/bin/env bash
# Reserves 2 MiB hugepages at run time and mounts hugetlbfs, for the demo, the tests and the
# benchmarks on this host (a production host reserves them at boot: docs/deployment.md).
#   scripts/hugepages.sh [PAGES]     (root; default 1024 pages = 2 GiB)
# Makes sure at least PAGES pages are free (adding to what is reserved, never taking away) and
# that a hugetlbfs is mounted on /dev/hugepages. When the kernel cannot give them, it says so
# and exits 0: configurations with `hugepages: preferred` then run on ordinary memory and say
# so in their log.
set -uo pipefail
want="${1:-1024}"
sys=/sys/kernel/mm/hugepages/hugepages-2048kB
say() { echo "hugepages: $*"; }

if [ ! -d "$sys" ]; then
    say "this kernel offers no 2 MiB hugepages; DPDK runs on ordinary memory (--no-huge)"
    exit 0
fi
free=$(cat "$sys/free_hugepages")
if [ "$free" -lt "$want" ]; then
    nr=$(cat "$sys/nr_hugepages")
    echo $((nr + want - free)) > "$sys/nr_hugepages" 2>/dev/null || true
    free=$(cat "$sys/free_hugepages")
fi
if ! awk '$3 == "hugetlbfs" { found = 1 } END { exit !found }' /proc/mounts; then
    mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null ||
        say "cannot mount hugetlbfs on /dev/hugepages"
fi
mounts=$(awk '$3 == "hugetlbfs" { printf "%s ", $2 }' /proc/mounts)
if [ "$free" -ge "$want" ] && [ -n "$mounts" ]; then
    say "$free free 2 MiB pages ($((free * 2)) MiB), hugetlbfs at ${mounts% }"
elif [ "$free" -gt 0 ] && [ -n "$mounts" ]; then
    say "only $free of $want 2 MiB pages free ($((free * 2)) MiB): DPDK processes that need more fall back to ordinary memory and say so"
else
    say "no usable 2 MiB pages (free: $free, hugetlbfs mounts: ${mounts:-none}): DPDK runs on ordinary memory (--no-huge) and says so"
fi
