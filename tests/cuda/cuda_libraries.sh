#!/usr/bin/env bash
# The CUDA libraries of a GPU machine whose loader is not configured for its toolkit (the case of a bare
# GPU machine that tools/gpu-check meets): in a mount namespace the toolkit's folder is hidden and its
# libraries appear only under /opt/nvidia/cuda/lib. Then pd2bw still starts (it links none of them), its
# cuda plugin (libpd2bw_cuda.so beside it) does not load, `pd2bw plugins` and ldd name what is not found
# (what gpu-check prints), and with LD_LIBRARY_PATH from tools/cuda-libs the plugin loads again.
# Skips (77) where namespaces cannot be made (not root, or no unshare). Arguments: pd2bw, source dir.
PD2BW="$1"
SRC="$2"
[ "$(id -u)" = 0 ] && command -v unshare >/dev/null || { echo "needs root and unshare: skipped"; exit 77; }
unshare -m true 2>/dev/null || { echo "cannot make a mount namespace here: skipped"; exit 77; }
PLUGIN="$(dirname "$(readlink -f "$PD2BW")")/libpd2bw_cuda.so"
lib="$(ldd "$PLUGIN" | awk '/libcublas\.so/ {print $3}')"
[ -n "$lib" ] || { echo "FAIL: $PLUGIN does not link cuBLAS"; exit 1; }
OUTFILE="$(mktemp)"
trap 'rm -f "$OUTFILE"' EXIT
export PD2BW PLUGIN SRC OUTFILE LIBDIR="$(dirname "$(readlink -f "$lib")")"
unshare -m bash -c '
  set -u
  mount --make-rprivate / 2>/dev/null
  mount -t tmpfs none /opt && mkdir -p /opt/nvidia/cuda/lib && mount --bind "$LIBDIR" /opt/nvidia/cuda/lib || exit 3
  mount -t tmpfs none "$LIBDIR" || exit 3
  failed=0
  "$PD2BW" --version >/dev/null 2>&1 || { echo "FAIL: pd2bw does not start without the CUDA libraries"; failed=1; }
  if "$PD2BW" plugins >"$OUTFILE" 2>&1; then echo "FAIL: the cuda plugin loaded with its libraries hidden"; failed=1; fi
  grep -qE "^plugin cuda: .*libcu(dart|blas|blasLt)\.so[.0-9]*: cannot open shared object file" "$OUTFILE" ||
    { echo "FAIL: pd2bw plugins does not name the missing library:"; cat "$OUTFILE"; failed=1; }
  ldd "$PLUGIN" | grep -q "libcublas.*not found" || { echo "FAIL: ldd does not say cuBLAS is not found"; failed=1; }
  found="$("$SRC/tools/cuda-libs")"
  case ":$found:" in *":/opt/nvidia/cuda/lib:"*) ;; *) echo "FAIL: tools/cuda-libs found $found"; failed=1 ;; esac
  LD_LIBRARY_PATH="$found" "$PD2BW" plugins | grep -q "^plugin cuda: .*: loads$" ||
    { echo "FAIL: the cuda plugin does not load with tools/cuda-libs"; failed=1; }
  exit $failed
'
rc=$?
[ "$rc" = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit "$rc"
