"""The BERT example profiles of tools/make-example-profiles: each BERT layer derived from the measured GPT
layer of the same kind at the same width, sequence length and microbatch. The rules, their numbers and
the checks behind them are in make-example-profiles' docstring ("BERT"); the functions below name the
rule they apply.
"""

GPT_VOCAB = 50304  # the measured GPT embedding and head (anchors' layer_profile_note)
VOCAB = 30528      # BERT's 30522 WordPiece ids rounded up to a multiple of 64 (see the docstring)
POSITIONS = 512    # learned position-table rows
TOKEN_TYPES = 2    # segment A / B
MASKED = 0.15      # share of the positions the loss counts (the profile still projects all of them)

# (file stem, blocks, d_model, heads, seq_len): the PipeDream-2BW paper's BERT sizes.
MODELS = [
    ("bert-355m", 24, 1024, 16, 512),
    ("bert-2.2b", 32, 2304, 32, 512),
    ("bert-3.8b", 32, 3072, 32, 512),
]
KINDS = ("embedding", "block", "head")


def block_flops(d, seq, causal, backward):
    """Matmul FLOPs per token of one block: the weight products 24 d^2 forward, 48 d^2 backward; the
    attention 4 T d forward (QK^T and PV) and 10 T d backward (FlashAttention-2 recomputes QK^T, then
    forms dV, dP, dQ and dK); a causal kernel skips the masked half of the attention."""
    weights = 48 * d * d if backward else 24 * d * d
    attention = (10 if backward else 4) * seq * d
    return weights + (attention // 2 if causal else attention)


def gpt_stash(kind, d, heads, seq, tokens):
    """The measured GPT layers' stash as a formula (bf16 autocast; check_formulas holds it to the anchors).
    block: bf16 copies of the 12 d^2 weights (24 d^2) and per token 36 d + 4 H + 16 bytes: bf16 inputs
    of QKV (2d), out-proj (2d), fc1 (2d) and fc2 (8d), Q, K, V (6d), the GELU's input (8d), the fp32
    residual sum the second LayerNorm keeps (4d) and the fp32 output the next block's LayerNorm keeps
    (4d), SDPA's logsumexp (4 H) and two LayerNorms' mean and rstd (16); 1 KiB more, as measured.
    embedding: the fp32 sum of token and position rows (4d a token) and the int64 position ids (8 T).
    head: the bf16 copy of the d x V projection, per token the fp32 log-softmax (4 V), the projection's
    bf16 input (2d) and the LayerNorm's statistics (8); 1 KiB more."""
    if kind == "block":
        return 24 * d * d + tokens * (36 * d + 4 * heads + 16) + 1024
    if kind == "embedding":
        return 4 * d * tokens + 8 * seq
    return 2 * d * GPT_VOCAB + tokens * (4 * GPT_VOCAB + 2 * d + 8) + 1024


def bert_stash(kind, d, heads, seq, tokens):
    """What the BERT layer keeps, counted as gpt_stash counts.
    block: the same terms (post-LN: the second LayerNorm keeps its fp32 input where GPT's next block
    keeps this block's output; the output itself goes to the next block, which keeps only its bf16
    copy), with this model's heads in the logsumexp.
    embedding: the fp32 sum of word, position and token-type rows that its LayerNorm keeps (4d), the
    LayerNorm's statistics (8) and the position ids (8 T).
    head (every position projected): the bf16 copies of the tied d x V decoder, the d x d dense and both
    biases; per token the fp32 log-softmax (4 V), the dense's bf16 input (2d), the GELU's input (2d), the
    LayerNorm's fp32 input (4d) and statistics (8), the decoder's bf16 input (2d); 1 KiB as measured."""
    if kind == "block":
        return gpt_stash("block", d, heads, seq, tokens)
    if kind == "embedding":
        return tokens * (4 * d + 8) + 8 * seq
    return (2 * d * VOCAB + 2 * d * d + 2 * d + 2 * VOCAB
            + tokens * (4 * VOCAB + 10 * d + 8) + 1024)


def gpt_params(kind, d, seq):
    """Parameters of the measured GPT layers (they equal the anchors' param_fp32_bytes / 4)."""
    if kind == "block":
        return 12 * d * d + 13 * d
    if kind == "embedding":
        return (GPT_VOCAB + seq) * d
    return GPT_VOCAB * d + 2 * d


def bert_params(kind, d):
    """block: as GPT's (QKV, out-proj, fc1, fc2 with biases, two LayerNorms); embedding: word, position
    and token-type tables and a LayerNorm; head: dense d x d with bias, LayerNorm, the decoder's copy of
    the word table (tied: the head's stage keeps it when apart from the embedding) and its bias (V)."""
    if kind == "block":
        return 12 * d * d + 13 * d
    if kind == "embedding":
        return (VOCAB + POSITIONS + TOKEN_TYPES) * d + 2 * d
    return d * d + 3 * d + VOCAB * d + VOCAB


def check_formulas(table, fail):
    """Every measured stash within 1% of gpt_stash and every parameter count equal to gpt_params, or
    fail: the BERT stashes are those formulas with BERT's terms."""
    worst = 0.0
    for (kind, d, seq), entries in sorted(table.items()):
        for b, e in sorted(entries.items()):
            want = gpt_stash(kind, d, e["heads"], seq, b * seq)
            off = (e["stash_bytes"] - want) / float(e["stash_bytes"])
            worst = max(worst, abs(off))
            if abs(off) > 0.01:
                fail("%s d=%d T=%d b=%d: stash %d is %.2f%% off the formula's %d"
                     % (kind, d, seq, b, e["stash_bytes"], 100 * off, want))
            if e["param_fp32_bytes"] != 4 * gpt_params(kind, d, seq):
                fail("%s d=%d T=%d: %d parameter bytes, the formula gives %d"
                     % (kind, d, seq, e["param_fp32_bytes"], 4 * gpt_params(kind, d, seq)))
    return worst


def interpolate(points, x):
    """Piecewise linear through (x, y) points; below the first, its y (a launch-bound floor); above the
    last, y in proportion to x."""
    points = sorted(points)
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / float(x1 - x0)
    return points[-1][1] * x / float(points[-1][0])


def slope(points):
    """Least-squares slope of y over x."""
    n = float(len(points))
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def work(kind, d, seq, b, backward):
    """What an unmeasured width is matched on (gpt_times): the block's matmul FLOPs (causal, as
    measured); the embedding's bytes, forward 28 per (token, channel) (two gathers and the add, fp32),
    backward 20 per (token, channel) (read the gradient, sorted scatter-add into the word and position
    rows) plus the 4 V d of the word-table gradient it writes."""
    tokens = b * seq
    if kind == "block":
        return tokens * block_flops(d, seq, True, backward)
    return (4 * GPT_VOCAB * d + 20 * tokens * d) if backward else 28 * tokens * d


def gpt_times(table, kind, d, seq, b, fail):
    """(fwd_ms, bwd_ms) of the GPT layer `kind` at (d, seq, b): measured, or from the measured widths.
    block and embedding: the nearest width's times over its microbatches, interpolated at the work of
    width d (work(); below the least measured work, its time: small layers are launch-bound). head: the
    least-squares line of time over d through every measured width, anchored at the nearest (its work is
    affine in d: the d x V projection beside the d-free cross-entropy over V)."""
    widths = sorted(w for (k, w, t) in table if k == kind and t == seq and b in table[(k, w, t)])
    if d in widths:
        e = table[(kind, d, seq)][b]
        return float(e["fwd_ms"]), float(e["bwd_ms"])
    if len(widths) < 2:
        fail("%s at T=%d b=%d is measured at %d widths; deriving d=%d needs 2" % (kind, seq, b, len(widths), d))
    near = min(widths, key=lambda w: (abs(w - d), w))
    entries = table[(kind, near, seq)]
    out = []
    for backward, key in ((False, "fwd_ms"), (True, "bwd_ms")):
        if kind == "head":
            line = [(w, float(table[(kind, w, seq)][b][key])) for w in widths]
            out.append(float(entries[b][key]) + slope(line) * (d - near))
        else:
            points = [(work(kind, near, seq, bb, backward), float(e[key])) for bb, e in entries.items()]
            out.append(interpolate(points, work(kind, d, seq, b, backward)))
    if min(out) <= 0:
        fail("%s at d=%d b=%d: the measured widths give %s" % (kind, d, b, out))
    return out[0], out[1]


def traffic_ms(nbytes, gbps):
    """Memory traffic (bytes read plus written) at the anchors' device-to-device rate."""
    return nbytes / (gbps * 1e9) * 1e3


def bert_times(table, kind, d, seq, b, gbps, fail):
    """(fwd_ms, bwd_ms) of the BERT layer: the GPT layer's (gpt_times) adjusted.
    block: times the FLOP ratio of bidirectional to causal attention (block_flops).
    embedding: + the token-type gather and add and the LayerNorm's forward (7 fp32 passes over the
    (tokens, d) activation: 28 d bytes a token); backward + the LayerNorm's (5 passes) and the token-type
    gradient (1 pass): 24 d bytes a token, less the word-table gradient GPT's larger table writes
    (4 (50304 - 30528) d bytes).
    head: its LayerNorm (14 d bytes a token forward with the cast, 20 d backward) kept, the rest (the
    d x V projection and the cross-entropy, both in proportion to V) scaled by 30528 / 50304; + the
    dense d x d at the GPT block's time per FLOP (2 d^2 of the block's 24 d^2 + 2 T d forward, 4 d^2 of
    its 48 d^2 + 5 T d backward), + the GELU (4 d bytes a token forward; 8 d backward with the dense's
    bias gradient), + the decoder bias's gradient (a read of the bf16 logits' gradient, 2 V a token)."""
    tokens = b * seq
    fwd, bwd = gpt_times(table, kind, d, seq, b, fail)
    if kind == "block":
        fwd *= block_flops(d, seq, False, False) / float(block_flops(d, seq, True, False))
        bwd *= block_flops(d, seq, False, True) / float(block_flops(d, seq, True, True))
    elif kind == "embedding":
        fwd += traffic_ms(28 * tokens * d, gbps)
        bwd += traffic_ms(24 * tokens * d - 4 * (GPT_VOCAB - VOCAB) * d, gbps)
    else:
        ln_fwd, ln_bwd = traffic_ms(14 * tokens * d, gbps), traffic_ms(20 * tokens * d, gbps)
        block_fwd, block_bwd = gpt_times(table, "block", d, seq, b, fail)
        scale = VOCAB / float(GPT_VOCAB)
        fwd = (ln_fwd + (fwd - ln_fwd) * scale + block_fwd * 2 * d * d / float(block_flops(d, seq, True, False))
               + traffic_ms(4 * tokens * d, gbps))
        bwd = (ln_bwd + (bwd - ln_bwd) * scale + block_bwd * 4 * d * d / float(block_flops(d, seq, True, True))
               + traffic_ms(8 * tokens * d, gbps) + traffic_ms(2 * tokens * VOCAB, gbps))
    return fwd, bwd


def weight_share(kind, d, seq):
    """The weight-gradient (W) share of the backward: a block's weight gradients 24 d^2 of its
    48 d^2 + 10 T d; the head's (dense and decoder) half of its products; all of the embedding's."""
    if kind == "block":
        return 24.0 * d * d / block_flops(d, seq, False, True)
    return 0.5 if kind == "head" else 1.0


def weight_stash(kind, d, tokens, stash):
    """What W keeps from the end of B, bf16: a block's weight-product inputs and output gradients
    (16 d a token); the head's dense input and output gradient and the decoder's input (3 d) and logits
    gradient (V); the embedding's int32 token and token-type ids and output gradient (at most its stash)."""
    if kind == "block":
        return 16 * d * 2 * tokens
    if kind == "head":
        return (3 * d + VOCAB) * 2 * tokens
    return min(8 * tokens + 2 * d * tokens, stash)


def build_layer(table, name, kind, d, heads, seq, sizes, prev_outputs, gbps, fail):
    per_mb = []
    measured = (kind, d, seq) in table
    for b in sizes:
        tokens = b * seq
        fwd, bwd = bert_times(table, kind, d, seq, b, gbps, fail)
        fwd, bwd = round(fwd, 4), round(bwd, 4)
        stash = bert_stash(kind, d, heads, seq, tokens)
        if measured:  # keep the allocator's rounding the measurement shows over the GPT formula
            e = table[(kind, d, seq)][b]
            stash += int(e["stash_bytes"]) - gpt_stash(kind, d, e["heads"], seq, tokens)
        weight = min(max(round(bwd * weight_share(kind, d, seq), 4), 0.0), bwd)
        per_mb.append({
            "microbatch": b,
            "fwd_ms": fwd,
            "bwd_ms": bwd,
            "input_bytes": tokens * 8 if kind == "embedding" else prev_outputs[b],
            "output_bytes": 4 if kind == "head" else tokens * d * 2,
            "stash_bytes": stash,
            "bwd_input_ms": max(round(bwd - weight, 4), 0.0),
            "bwd_weight_ms": weight,
            "bwd_weight_stash_bytes": weight_stash(kind, d, tokens, stash),
        })
    layer = {"name": name, "kind": kind, "param_bytes": 2 * bert_params(kind, d), "per_microbatch": per_mb}
    return layer, {p["microbatch"]: p["output_bytes"] for p in per_mb}


def microbatch_sizes(table, d, seq):
    """The microbatches measured for every kind at the width the layers come from (d or the nearest)."""
    widths = sorted({w for (k, w, t) in table if t == seq})
    if not widths:
        return []
    near = d if d in widths else min(widths, key=lambda w: (abs(w - d), w))
    common = None
    for kind in KINDS:
        sizes = set(table.get((kind, near, seq), {}).keys())
        common = sizes if common is None else common & sizes
    return sorted(common or [])


def model_layers(table, blocks, d, heads, seq, sizes, gbps, fail):
    order = [("embedding", "embedding")] + [("block.%d" % i, "block") for i in range(blocks)] + [("head", "head")]
    layers, prev = [], None
    for name, kind in order:
        layer, prev = build_layer(table, name, kind, d, heads, seq, sizes, prev, gbps, fail)
        layers.append(layer)
    return layers


def block_check(anchors, table, fail):
    """The d = 1024 rule applied at T = 1024 against the bf16 d = 1024 block measured there (the
    anchors' block_profile): (least, largest) measured / derived, forward and backward, or None."""
    ratios = {"fwd_ms": [], "bwd_ms": [], "proportional": []}
    for e in anchors.get("block_profile", []):
        if e.get("dtype") != "bf16" or e.get("d") != 1024 or ("block", 1024, e.get("T")) in table:
            continue
        seq, b = e["T"], e["b"]
        fwd, bwd = gpt_times(table, "block", 1024, seq, b, fail)
        ratios["fwd_ms"].append(e["fwd_ms"] / fwd)
        ratios["bwd_ms"].append(e["bwd_ms"] / bwd)
        # FLOPs in proportion alone: the 2048 block at the same microbatch, scaled.
        near = table.get(("block", 2048, seq), {}).get(b)
        for backward, key in ((False, "fwd_ms"), (True, "bwd_ms")):
            if near:
                flops = block_flops(1024, seq, True, backward) / float(block_flops(2048, seq, True, backward))
                ratios["proportional"].append(e[key] / (near[key] * flops))
    if not ratios["fwd_ms"] or not ratios["proportional"]:
        return None
    return {k: (min(v), max(v)) for k, v in ratios.items()}


def notes(anchors, blocks, d, heads, seq, source, params):
    gbps = anchors["ceilings"]["d2d_copy_GBps_rw"]
    fwd_ratio = block_flops(d, seq, False, False) / float(block_flops(d, seq, True, False))
    bwd_ratio = block_flops(d, seq, False, True) / float(block_flops(d, seq, True, True))
    return (
        "DERIVED, not measured: every layer is the PyTorch %s eager bf16-autocast measurement of the GPT "
        "layer of the same kind on one %s (the reference measurements file) %s, then adjusted to BERT by "
        "formula (tools/make-example-profiles' docstring, section BERT, gives each rule). Post-LN BERT: %d blocks, "
        "d_model %d, %d heads, seq_len %d, vocab %d (30522 WordPiece ids rounded up to a multiple of 64 so "
        "the decoder's bf16 rows are 16-byte aligned), %d learned positions, %d token types, exact-erf GELU, "
        "MLP 4 d; the masked-LM head (dense d x d, GELU, LayerNorm, decoder tied to the word table plus its "
        "own bias) projects ALL positions and takes softmax cross-entropy over every row, though the loss "
        "counts only the masked %.0f%%: a head that gathered the masked positions first would have about "
        "%.0f%% of the decoder's and the cross-entropy's time and per-token stash. %d parameters, the "
        "head's copy of the tied table not counted; the head's param_bytes counts it (its stage keeps a "
        "copy when apart from the embedding). Block: the GPT block's fwd_ms x %.4f and bwd_ms x %.4f, the "
        "matmul FLOP ratios of bidirectional to causal attention (forward 24 d^2 + 4 T d over "
        "24 d^2 + 2 T d, backward 48 d^2 + 10 T d over 48 d^2 + 5 T d per token); post-LN moves the two "
        "LayerNorms and adds none, so the stash is the GPT block's formula (24 d^2 + tokens x "
        "(36 d + 4 heads + 16) + 1 KiB) with this model's heads. Embedding: GPT's (word + position) plus "
        "the token-type gather and add and a LayerNorm, priced as memory traffic at the measured "
        "%.1f GB/s (forward + 28 d bytes a token; backward + 24 d a token less 4 x (50304 - %d) x d for "
        "the smaller word-table gradient); input_bytes is the int32 token and token-type ids. Head: GPT's "
        "(LayerNorm + d x V projection + cross-entropy) with the part in proportion to the vocabulary x "
        "%d/50304, plus the dense d x d at the GPT block's time per FLOP, the GELU and the decoder bias's "
        "gradient as traffic. Stashes follow the GPT formulas that reproduce the measured ones within 1%% "
        "(plus the measurement's own allocator rounding where the width is measured); input_bytes of a "
        "block or the head is the previous layer's bf16 output, the head outputs the 4-byte loss. The "
        "split backward: W share %.4f for a block (24 d^2 of 48 d^2 + 10 T d), 0.5 for the head, 1 for "
        "the embedding; bwd_weight_stash_bytes 16 d x 2 a token for a block, (3 d + vocab) x 2 for the "
        "head, the ids and output gradient for the embedding. device.memory_bytes is the H200's total "
        "memory as the CUDA driver reports it. No links were measured."
        % (anchors.get("torch", "?"), anchors.get("gpu", "?"), source, blocks, d, heads, seq, VOCAB,
           POSITIONS, TOKEN_TYPES, 100 * MASKED, 100 * MASKED, params, fwd_ratio, bwd_ratio, gbps, VOCAB,
           VOCAB, weight_share("block", d, seq)))


def build_profile(anchors, table, stem, blocks, d, heads, seq, command_line, memory_bytes, fail):
    """The profile dict of one BERT model, or None when the anchors have no layers at seq."""
    sizes = microbatch_sizes(table, d, seq)
    if not sizes:
        return None
    gbps = float(anchors["ceilings"]["d2d_copy_GBps_rw"])
    layers = model_layers(table, blocks, d, heads, seq, sizes, gbps, fail)
    widths = sorted({w for (k, w, t) in table if t == seq})
    if all((k, d, seq) in table for k in KINDS):
        source = "at d_model %d, seq_len %d" % (d, seq)
    else:
        near = min(widths, key=lambda w: (abs(w - d), w))
        source = ("at seq_len %d scaled to d_model %d, which was not measured: the block and the embedding "
                  "from d_model %d at equal work (matmul FLOPs; the embedding's bytes), interpolated over "
                  "the measured microbatches (below the smallest, its time: launch-bound), the head along "
                  "the least-squares line of time over d_model through the measured widths %s, anchored "
                  "at d_model %d (bytes by the formulas)"
                  % (seq, d, near, "/".join(map(str, widths)), near))
    params = (bert_params("embedding", d) + blocks * bert_params("block", d) + bert_params("head", d)
              - VOCAB * d)
    return {
        "schema": "pd2bw.profile",
        "schema_version": "1.2.0",  # the split backward keys
        "provenance": {
            "tool": "tools/make-example-profiles",
            "version": "1",
            "git_sha": "unknown",
            "command_line": command_line,
            "notes": notes(anchors, blocks, d, heads, seq, source, params),
        },
        "model": {
            "kind": "bert",
            "name": stem,
            "blocks": blocks,
            "d_model": d,
            "heads": heads,
            "seq_len": seq,
            "vocab": VOCAB,
            "dtype": "bf16",
            "tie_embeddings": True,
            "ln": "post",
        },
        "device": {"name": anchors.get("gpu", "NVIDIA H200"), "memory_bytes": memory_bytes},
        "microbatch_sizes": sizes,
        "layers": layers,
        "links": [],
    }
