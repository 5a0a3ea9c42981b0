#!/usr/bin/env bash
# `pd2bw validate` checks a plan's numbers: on their own (memory totals against their terms and the
# device, in-flight counts against the schedule, step times against the stages, the predictions against
# each other) and, with --profile, against the plan recomputed from its profile. Each way of editing a
# plan by hand is refused with the JSON pointer of the edited number; the planner's own plans pass.
source "$(dirname "$0")/lib.bash"
EX="$SRC/schemas/examples"
P="$EX/gpt-1.3b.profile.json"

# edit OUT EXPR: writes the plan with a Python statement applied to `d` (s: d["stages"]).
edit() { json_edit "$TMP/plan.json" "$1" "s = d[\"stages\"]; $2"; }

# Plans of every schedule, with and without recompute, pass both checks.
for args in "--schedule 2bw" "--schedule flush" "--schedule gpipe" "--schedule 2bw --device-memory 16GiB" \
            "--schedule gpipe --device-memory 16GiB --global-batch 256"; do
  # shellcheck disable=SC2086
  "$PD2BW" plan --profile "$P" $args -o "$TMP/ok.json" --quiet 2>"$TMP/err" || fail "plan $args"
  expect_exit 0 "" -- "$PD2BW" validate "$TMP/ok.json"
  expect_exit 0 "" -- "$PD2BW" validate --profile "$P" "$TMP/ok.json"
  grep -q "every number agrees" "$TMP/out" && ok || fail "validate --profile says nothing of the numbers ($args)"
done
grep -q '"recompute": true' "$TMP/ok.json" && ok || fail "no plan above recomputes: the 16 GiB cases lost their point"

"$PD2BW" plan --profile "$P" --schedule flush --depth 4 -o "$TMP/plan.json" --quiet 2>"$TMP/err" || fail "plan flush d=4"

# The rules of a plan's own numbers.
edit "$TMP/total.json" 's[1]["memory"]["total_bytes"] += 4096'
expect_exit 2 "/stages/1/memory/total_bytes: is [0-9]+ but its terms add up to" -- "$PD2BW" validate "$TMP/total.json"
edit "$TMP/inflight.json" 's[0]["in_flight"] = 99'
expect_exit 2 "/stages/0/in_flight: is 99 but flush with d = 4 and m = [0-9]+ keeps 4" -- "$PD2BW" validate "$TMP/inflight.json"
edit "$TMP/fast.json" 'p = d["predictions"]; p["step_ms"] /= 2; p["samples_per_s"] *= 2; p["tokens_per_s"] *= 2'
expect_exit 2 "/predictions/step_ms: is .* alone is busy" -- "$PD2BW" validate "$TMP/fast.json"
edit "$TMP/over.json" 'm = s[2]["memory"]; extra = m["limit_bytes"]; m["stash_bytes"] += extra; m["total_bytes"] += extra'
expect_exit 2 "/stages/2/memory/total_bytes: [0-9]+ bytes do not fit the device" -- "$PD2BW" validate "$TMP/over.json"
edit "$TMP/dominant.json" 's[0]["memory"]["dominant"] = "reserve" if s[0]["memory"]["dominant"] != "reserve" else "comm"'
expect_exit 2 "/stages/0/memory/dominant" -- "$PD2BW" validate "$TMP/dominant.json"
edit "$TMP/stage_step.json" 's[3]["step_ms"] /= 3'
expect_exit 2 "/stages/3/step_ms: is .* m x \\(compute_ms \\+ p2p_ms\\) \\+ allreduce_ms" -- "$PD2BW" validate "$TMP/stage_step.json"
edit "$TMP/tokens.json" 'd["predictions"]["tokens_per_s"] *= 1.01'
expect_exit 2 "/predictions/tokens_per_s" -- "$PD2BW" validate "$TMP/tokens.json"
edit "$TMP/idle.json" 'd["predictions"]["bubble_fraction"] = 0.7; d["predictions"]["imbalance_fraction"] = 0.6'
expect_exit 2 "/predictions/imbalance_fraction: bubble_fraction \\+ imbalance_fraction must be <= 1" -- "$PD2BW" validate "$TMP/idle.json"
edit "$TMP/alt.json" 'd["alternatives"][0]["step_ms"] = d["predictions"]["step_ms"] / 2'
expect_exit 2 "/alternatives/0/step_ms: is .* faster than the plan" -- "$PD2BW" validate "$TMP/alt.json"
# Two edits: both are named.
edit "$TMP/two.json" 's[1]["memory"]["total_bytes"] += 1; s[0]["in_flight"] = 7'
expect_exit 2 "2 numbers of the plan" -- "$PD2BW" validate "$TMP/two.json"
grep -q "/stages/0/in_flight" "$TMP/err" && grep -q "/stages/1/memory/total_bytes" "$TMP/err" && ok ||
  fail "validate names only one of two edited numbers"

# Edits that keep the plan's own rules: only the profile can tell.
edit "$TMP/slow.json" 'p = d["predictions"]; f = 1.1; p["step_ms"] *= f; p["samples_per_s"] /= f; p["tokens_per_s"] /= f
d["alternatives"] = []'
expect_exit 0 "" -- "$PD2BW" validate "$TMP/slow.json"
expect_exit 2 "/predictions/step_ms: is .* but the replay of the profile gives" -- \
  "$PD2BW" validate --profile "$P" "$TMP/slow.json"
edit "$TMP/compute.json" 's[2]["compute_ms"] *= 0.9'
expect_exit 0 "" -- "$PD2BW" validate "$TMP/compute.json"
expect_exit 2 "/stages/2/compute_ms: is .* but the profile gives" -- "$PD2BW" validate --profile "$P" "$TMP/compute.json"
edit "$TMP/stash.json" 'm = s[1]["memory"]; m["stash_bytes"] -= 1000; m["total_bytes"] -= 1000'
expect_exit 0 "" -- "$PD2BW" validate "$TMP/stash.json"
expect_exit 2 "/stages/1/memory/stash_bytes" -- "$PD2BW" validate --profile "$P" "$TMP/stash.json"
edit "$TMP/flag.json" 's[0]["recompute"] = not s[0]["recompute"]'
expect_exit 2 "/stages/0/" -- "$PD2BW" validate --profile "$P" "$TMP/flag.json"
# A plan of another model is refused, not compared.
expect_exit 2 "not the profile's" -- "$PD2BW" validate --profile "$EX/gpt-3.8b.profile.json" "$TMP/plan.json"

finish
