#!/usr/bin/env bash
# Plays a CSV table into a directory as a stream of files, for a job that follows it
# (docs/online.md):
#
#   bash tools/stream_files.sh SRC.csv DIR [ROWS_PER_FILE] [SECONDS]
#
# DIR/000000.csv comes first, at once: one row in STREAM_SAMPLE (default 30) of the whole table,
# the job's first data (its statistics and held-out test rows). Then the other rows, in the table's
# order, ROWS_PER_FILE (default 20000) to a file, one file every SECONDS (default 1), each written
# in DIR/.stage and renamed into DIR whole. Files are named in arrival order (000001.csv, ...).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 SRC.csv DIR [ROWS_PER_FILE] [SECONDS]" >&2
  exit 2
fi
src="$1"
dir="$2"
rows="${3:-20000}"
every="${4:-1}"
sample="${STREAM_SAMPLE:-30}"
if [[ ! -r "${src}" ]]; then
  echo "stream_files: can't read ${src}" >&2
  exit 1
fi
if ! [[ "${rows}" =~ ^[1-9][0-9]*$ && "${sample}" =~ ^[1-9][0-9]*$ ]]; then
  echo "stream_files: ROWS_PER_FILE and STREAM_SAMPLE must be positive integers" >&2
  exit 2
fi

stage="${dir}/.stage"
rm -rf "${stage}"
mkdir -p "${stage}"
header="$(head -n 1 "${src}")"
echo "${header}" > "${stage}/000000.csv"
# One pass: the sample into the first file, the rest into numbered files.
tail -n +2 "${src}" | awk -v stage="${stage}" -v rows="${rows}" -v sample="${sample}" \
    -v header="${header}" '
  {
    if ((NR - 1) % sample == 0) { print >> (stage "/000000.csv"); next }
    f = sprintf("%s/%06d.csv", stage, 1 + int(n / rows))
    if (n % rows == 0) { if (last != "") close(last); print header > f; last = f }
    print >> f
    n++
  }'

mv "${stage}/000000.csv" "${dir}/000000.csv"
echo "stream_files: ${dir}/000000.csv ($(($(wc -l < "${dir}/000000.csv") - 1)) rows) is the first file"
count=0
for f in "${stage}"/*.csv; do
  sleep "${every}"
  mv "${f}" "${dir}/$(basename "${f}")"
  count=$((count + 1))
  echo "stream_files: ${dir}/$(basename "${f}")"
done
rmdir "${stage}"
echo "stream_files: ${count} files after the first; done"
