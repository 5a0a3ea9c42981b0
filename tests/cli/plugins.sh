#!/usr/bin/env bash
# The plugins (the cuda backend, the mpi and nccl transports in libpd2bw_<name>.so, loaded with dlopen):
# pd2bw links none of CUDA, NCCL or MPI; --version lists the plugins it finds; a missing plugin, a file
# that is not a library, a library that is not a plugin and a plugin of another ABI version each give
# a one-line error naming the file and the reason, with exit 2 and no crash.
source "$2/tests/cli/lib.bash" "$1" "$2"
BIN_DIR="$(dirname "$(readlink -f "$PD2BW")")"

# 1. The executable maps no CUDA, NCCL or MPI library.
ldd "$PD2BW" >"$TMP/ldd" 2>&1 || fail "ldd $PD2BW failed"
if grep -E "lib(cuda|cudart|cublas|cublasLt|nccl|mpi|open-pal|open-rte)[.-]" "$TMP/ldd"; then
  fail "pd2bw links a CUDA, NCCL or MPI library"
else ok; fi

# The plugins this build made: its backends but cpu and its transports but threads.
"$PD2BW" --version >"$TMP/version" || fail "pd2bw --version"
built=$(sed -n 's/^backends: //p; s/^transports: //p' "$TMP/version" | tr ',' '\n' | tr -d ' ' | grep -vx 'cpu\|threads')
echo "plugins built: ${built:-none}"

# 2. --version names each plugin's file beside the executable, and it is there.
for name in $built; do
  line=$(grep "^plugin $name: " "$TMP/version")
  [ "$line" = "plugin $name: $BIN_DIR/libpd2bw_$name.so" ] && [ -f "$BIN_DIR/libpd2bw_$name.so" ] && ok ||
    fail "--version: wanted 'plugin $name: $BIN_DIR/libpd2bw_$name.so', got '$line'"
done
[ "$(grep -c '^plugin ' "$TMP/version")" = "$(echo "$built" | grep -c .)" ] && ok || fail "--version lists other plugins"
# `pd2bw plugins` loads each one (here every plugin the build made must load: its libraries are here).
expect_exit 0 "" -- "$PD2BW" plugins
for name in $built; do grep -q "^plugin $name: .*: loads$" "$TMP/out" && ok || fail "pd2bw plugins: $name does not load"; done

# The same executable alone in a folder: the search finds only what PD2BW_PLUGIN_PATH names.
mkdir -p "$TMP/bare" "$TMP/empty" "$TMP/garbage" "$TMP/notplugin" "$TMP/otherabi"
cp "$PD2BW" "$TMP/bare/pd2bw"
BARE="$TMP/bare/pd2bw"
"$PD2BW" plan -q --profile "$SRC/schemas/examples/gpt-tiny.profile.json" --nodes 1 --gpus-per-node 2 \
  --device-memory 4MiB --reserve 0 --global-batch 4 -o "$TMP/plan.json" || fail "plan"
expect_exit 0 "" -- env PD2BW_PLUGIN_PATH="$TMP/empty" "$BARE" validate "$TMP/plan.json"

# The bare executable's run that needs plugin $1 (cuda: train --device cuda; mpi: train as one process of
# an mpirun job, as the launcher's environment says), with PD2BW_PLUGIN_PATH=$2.
run_needing() {
  case "$1" in
    cuda) echo env PD2BW_PLUGIN_PATH="$2" "$BARE" train --plan "$TMP/plan.json" --device cuda --steps 1 -q ;;
    mpi) echo env PD2BW_PLUGIN_PATH="$2" OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$BARE" train \
      --plan "$TMP/plan.json" --steps 1 -q ;;
  esac
}
# refuses NAME DIR RUN LINE: with PD2BW_PLUGIN_PATH=DIR the bare executable's run that needs plugin NAME
# (cuda: train --device cuda; mpi: train as one process of an mpirun job) stops with exit 2 and the
# message RUN (unless RUN is empty); and `pd2bw plugins` (which also covers nccl, loaded only inside a
# job) exits 1 and says LINE on NAME's line.
refuses() {
  local name="$1" dir="$2" pattern="$3" line="$4"
  case "$name" in cuda | mpi) [ -n "$pattern" ] && expect_exit 2 "^pd2bw: error: $pattern" -- $(run_needing "$name" "$dir") ;; esac
  PD2BW_PLUGIN_PATH="$dir" "$BARE" plugins >"$TMP/plugins.out" 2>&1
  [ $? = 1 ] && ok || fail "pd2bw plugins did not exit 1 with $dir"
  grep -qE "^plugin $name: .*$line" "$TMP/plugins.out" && ok ||
    { fail "pd2bw plugins: the $name line lacks /$line/"; sed 's/^/  | /' "$TMP/plugins.out" >&2; }
}
for name in $built; do
  what="the $name (backend|transport) plugin"
  # 3. Missing: says which file and where it looked (pd2bw plugins: "not found (looked in ...)").
  case "$name" in cuda | mpi)
    expect_exit 2 "^pd2bw: error: $what libpd2bw_$name.so was not found \(looked in $TMP/empty, $TMP/bare, $TMP/bare/../lib/pd2bw\)$" \
      -- $(run_needing "$name" "$TMP/empty")
    grep -q "^hint: .*preset" "$TMP/err" && ok || fail "$name missing: no hint on how to get it" ;;
  esac
  refuses "$name" "$TMP/empty" "" "not found \(looked in $TMP/empty, $TMP/bare, $TMP/bare/../lib/pd2bw\)"
  # 4. Not a library at all: the loader's reason (pd2bw plugins: the cheap check says it first).
  echo "not a library" >"$TMP/garbage/libpd2bw_$name.so"
  case "$name" in cuda | mpi)
    expect_exit 2 "^pd2bw: error: cannot load $what $TMP/garbage/libpd2bw_$name.so: .*(invalid ELF header|file too short)" \
      -- $(run_needing "$name" "$TMP/garbage") ;;
  esac
  refuses "$name" "$TMP/garbage" "" "unusable: it is not a shared library \(no ELF header\)"
  # 5. A shared library without the entry point.
  cp -L "$(ldd "$PD2BW" | awk '/libstdc\+\+/ {print $3}')" "$TMP/notplugin/libpd2bw_$name.so"
  msg="$TMP/notplugin/libpd2bw_$name.so is not $what: it has no entry point pd2bw_${name}_plugin"
  refuses "$name" "$TMP/notplugin" "$msg" "$msg"
  # 6. Another ABI version.
  if [ -f "$BIN_DIR/libpd2bw_test_other_abi.so" ]; then
    cp "$BIN_DIR/libpd2bw_test_other_abi.so" "$TMP/otherabi/libpd2bw_$name.so"
    msg="$TMP/otherabi/libpd2bw_$name.so was built for plugin ABI version [0-9]+, but this pd2bw needs version [0-9]+"
    refuses "$name" "$TMP/otherabi" "$msg\$" "$msg\)\$"
  else
    fail "libpd2bw_test_other_abi.so was not built beside pd2bw"
  fi
done

# 7. --version says what is wrong from cheap checks alone.
if [ -n "$built" ]; then
  PD2BW_PLUGIN_PATH="$TMP/garbage" "$BARE" --version >"$TMP/v2" || fail "--version with a bad plugin"
  for name in $built; do
    grep -q "^plugin $name: $TMP/garbage/libpd2bw_$name.so (unusable: it is not a shared library (no ELF header))$" "$TMP/v2" &&
      ok || fail "--version does not say the $name plugin is not a library"
  done
fi
finish
