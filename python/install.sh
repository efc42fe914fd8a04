#!/usr/bin/env bash
# Installs the pstrain Python package built by //python:pstrain for /usr/bin/python3:
#
#   bazel run -c opt //python:install                  # into the user's site-packages
#   bazel run -c opt //python:install -- --target=DIR  # into DIR (then PYTHONPATH=DIR)
#
# Replaces an earlier install of it there. Prints where it went.
set -euo pipefail

target=""
for arg in "$@"; do
  case "$arg" in
    --target=*) target="${arg#--target=}" ;;
    -h|--help) sed -n 2,7p "$0"; exit 0 ;;
    *) echo "install: unknown argument '$arg' (--target=DIR)" >&2; exit 2 ;;
  esac
done
if [[ -z "$target" ]]; then
  target="$(/usr/bin/python3 -m site --user-site)"
fi
# Under `bazel run`, a relative --target means the user's directory.
if [[ "$target" != /* && -n "${BUILD_WORKING_DIRECTORY:-}" ]]; then
  target="${BUILD_WORKING_DIRECTORY}/${target}"
fi

runfiles="${RUNFILES_DIR:-$0.runfiles}"
package="${runfiles}/pstrain/python/site/pstrain"
if [[ ! -f "${package}/_pstrain.so" ]]; then
  echo "install: the built package is not at ${package} (run it with bazel run //python:install)" >&2
  exit 1
fi
mkdir -p "$target"
rm -rf "${target}/pstrain.tmp"
cp -rL "$package" "${target}/pstrain.tmp"
chmod -R u+w "${target}/pstrain.tmp"
rm -rf "${target}/pstrain"
mv "${target}/pstrain.tmp" "${target}/pstrain"
echo "install: pstrain installed in ${target}/pstrain for /usr/bin/python3"
if [[ "$target" != "$(/usr/bin/python3 -m site --user-site)" ]]; then
  echo "install: add it to the path: export PYTHONPATH=${target}"
fi
