#!/usr/bin/env bash
# Old/new A/B of CPU decode on this host: alternates the given attnkit CLIs ROUNDS times on one
# argument list and prints, per CLI and round, each row's median ms and % of the run's read
# ceiling (sorted, so each CLI's rounds sit together). ATTNKIT_CPU_ISA picks the level as usual;
# OP=prefill times prefill rows instead (their % is of the run's FMA ceiling).
#   ATTNKIT_CPU_ISA=avx2 dev/ab/cpu_decode_ab.sh 3 "--batch 4 --kv-len 65536 --dtype bf16,f32" OLD NEW
#   OP=prefill dev/ab/cpu_decode_ab.sh 3 "--batch 1 --kv-len 1024,2048 --dtype f32" OLD NEW
set -u
rounds=$1 args=$2
shift 2
for ((r = 0; r < rounds; ++r)); do
  for cli in "$@"; do
    # shellcheck disable=SC2086
    row=$("$cli" bench --backend cpu --threads 2 --op "${OP:-decode}" $args --reps 10 --warmup 2 2>&1 |
      awk '/^(decode|prefill)/ {printf "%s %s  ", $(NF-6), $(NF-2)}')
    echo "$cli  $row"
  done
done | sort
