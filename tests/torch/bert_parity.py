#!/usr/bin/env python3
"""bert_parity.py DIR: checks the cases bert_dump wrote into DIR against a BERT built here in PyTorch.

For every DIR/bert_*.safetensors the model is written from BERT's formulas (not from pd2bw's code), in the
file's dtype, with the file's parameters; it runs forward and backward on the file's batch and compares the
loss and every gradient with pd2bw's: max |difference| / max(1, max |pd2bw gradient|) (the loss: / max(1,
|loss|)) must be within 1e-12 in double and 1e-5 in float. Then, where transformers imports, the post-LN double
checkpoint is loaded into Hugging Face's BertForMaskedLM by its names and its loss must match pd2bw's within
1e-10. Exits 1 on any failure.
"""

import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open

TOL = {"f64": 1e-12, "f32": 1e-5}
HF_LOSS_TOL = 1e-10
EPS = 1e-5  # every layer norm (pd2bw's kLayerNormEps, BERT's layer_norm_eps here)
IGNORE = -100


def read_case(path):
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    cfg = {k: int(meta[k]) for k in ("vocab", "seq_len", "d_model", "heads", "blocks")}
    cfg["ln"] = meta["ln"]
    cfg["dtype"] = meta["dtype"]
    params = {k: v for k, v in tensors.items() if not k.startswith(("grad/", "batch/")) and k != "loss"}
    grads = {k[len("grad/"):]: v for k, v in tensors.items() if k.startswith("grad/")}
    batch = {k[len("batch/"):]: v.long() for k, v in tensors.items() if k.startswith("batch/")}
    return cfg, params, grads, batch, float(tensors["loss"][0])


def expected_names(cfg):
    names = ["bert.embeddings." + n for n in ("word_embeddings.weight", "position_embeddings.weight",
                                               "token_type_embeddings.weight", "LayerNorm.weight", "LayerNorm.bias")]
    for i in range(cfg["blocks"]):
        p = f"bert.encoder.layer.{i}."
        for t in ("query", "key", "value"):
            names += [p + f"attention.self.{t}.weight", p + f"attention.self.{t}.bias"]
        for m in ("attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "output.dense",
                  "output.LayerNorm"):
            names += [p + m + ".weight", p + m + ".bias"]
    if cfg["ln"] == "pre":
        names += ["bert.encoder.final_layernorm.weight", "bert.encoder.final_layernorm.bias"]
    names += ["cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
              "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
              "cls.predictions.bias"]
    return names


def layer_norm(x, p, prefix):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
    return (x - mean) / torch.sqrt(var + EPS) * p[prefix + ".weight"] + p[prefix + ".bias"]


def linear(x, p, prefix):
    return x @ p[prefix + ".weight"].T + p[prefix + ".bias"]


def gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))  # exact (erf) GELU


def attention(x, p, prefix, lengths, heads):
    b, s, c = x.shape
    d = c // heads

    def split(t):  # (B, S, C) -> (B, H, S, D)
        return t.view(b, s, heads, d).transpose(1, 2)

    q = split(linear(x, p, prefix + "self.query"))
    k = split(linear(x, p, prefix + "self.key"))
    v = split(linear(x, p, prefix + "self.value"))
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)  # (B, H, S, S): query rows, key columns
    key_ok = torch.arange(s)[None, :] < lengths[:, None]  # (B, S): key j is real iff j < length
    scores = scores.masked_fill(~key_ok[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    ctx = (probs @ v).transpose(1, 2).reshape(b, s, c)
    return linear(ctx, p, prefix + "output.dense")


def bert_loss(cfg, p, batch):
    tokens, types, lengths, targets = batch["tokens"], batch["types"], batch["lengths"], batch["targets"]
    s = tokens.shape[1]
    e = "bert.embeddings."
    h = p[e + "word_embeddings.weight"][tokens] + p[e + "position_embeddings.weight"][torch.arange(s)][None] \
        + p[e + "token_type_embeddings.weight"][types]
    h = layer_norm(h, p, e + "LayerNorm")
    for i in range(cfg["blocks"]):
        pre = f"bert.encoder.layer.{i}."
        att = pre + "attention."
        if cfg["ln"] == "post":
            x1 = layer_norm(h + attention(h, p, att, lengths, cfg["heads"]), p, att + "output.LayerNorm")
            mlp = linear(gelu(linear(x1, p, pre + "intermediate.dense")), p, pre + "output.dense")
            h = layer_norm(x1 + mlp, p, pre + "output.LayerNorm")
        else:
            x1 = h + attention(layer_norm(h, p, att + "output.LayerNorm"), p, att, lengths, cfg["heads"])
            inner = layer_norm(x1, p, pre + "output.LayerNorm")
            h = x1 + linear(gelu(linear(inner, p, pre + "intermediate.dense")), p, pre + "output.dense")
    if cfg["ln"] == "pre":
        h = layer_norm(h, p, "bert.encoder.final_layernorm")
    t = "cls.predictions.transform."
    h = layer_norm(gelu(linear(h, p, t + "dense")), p, t + "LayerNorm")
    logits = h @ p[e + "word_embeddings.weight"].T + p["cls.predictions.bias"]
    return F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1), ignore_index=IGNORE,
                           reduction="mean")


def check_case(path):
    cfg, params, grads, batch, loss_pd = read_case(path)
    names = expected_names(cfg)
    problems = []
    if set(params) != set(names) or set(grads) != set(names):
        problems.append(f"tensor names differ: missing {sorted(set(names) - set(params))}, "
                        f"unexpected {sorted(set(params) - set(names))}, grads {sorted(set(grads) ^ set(names))}")
        return cfg, loss_pd, float("nan"), ("-", float("nan")), problems
    if not (batch["lengths"] < cfg["seq_len"]).any():
        problems.append("no padded row in the batch")
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    loss = bert_loss(cfg, leaves, batch)
    loss.backward()
    tol = TOL[cfg["dtype"]]
    loss_err = abs(loss.item() - loss_pd) / max(1.0, abs(loss_pd))
    if not loss_err <= tol:
        problems.append(f"loss {loss.item()!r} vs pd2bw {loss_pd!r}: error {loss_err:.3e} > {tol:g}")
    worst = ("-", -1.0)
    for name in names:
        ref = grads[name].double()
        got = leaves[name].grad.double()
        err = (got - ref).abs().max().item() / max(1.0, ref.abs().max().item())
        if not err <= tol:
            problems.append(f"grad {name}: error {err:.3e} > {tol:g}")
        if not err <= worst[1]:
            worst = (name, err)
    return cfg, loss_pd, loss.item(), worst, problems


def check_transformers(path):
    """Loads the post-LN double case into BertForMaskedLM; returns a list of problems (empty: passed)."""
    try:
        from transformers import BertConfig, BertForMaskedLM
    except Exception as e:  # noqa: BLE001 - any import failure means "not available"
        print(f"transformers not available: checkpoint load not checked ({type(e).__name__})")
        return []
    cfg, params, grads, batch, loss_pd = read_case(path)
    c = cfg["d_model"]
    config = BertConfig(vocab_size=cfg["vocab"], hidden_size=c, num_hidden_layers=cfg["blocks"],
                        num_attention_heads=cfg["heads"], intermediate_size=4 * c,
                        max_position_embeddings=cfg["seq_len"], type_vocab_size=2, hidden_act="gelu",
                        layer_norm_eps=EPS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        attn_implementation="eager")
    torch.manual_seed(0)
    model = BertForMaskedLM(config).double().eval()
    result = model.load_state_dict(params, strict=False)
    # A missing key is fine only when it names a buffer (position_ids, token_type_ids) or a parameter tied
    # to one that was loaded (the decoder's weight is the word table, its bias cls.predictions.bias).
    loaded = {id(t) for n, t in model.named_parameters(remove_duplicate=False) if n in params}
    by_name = dict(model.named_parameters(remove_duplicate=False))
    buffers = {n for n, _ in model.named_buffers()}
    problems = []
    tied, buffer_missing = [], []
    for k in result.missing_keys:
        if k in by_name and id(by_name[k]) in loaded:
            tied.append(k)
        elif k in buffers:
            buffer_missing.append(k)
        else:
            problems.append(f"BertForMaskedLM: missing key {k}")
    for k in result.unexpected_keys:
        problems.append(f"BertForMaskedLM: unexpected key {k}")
    print(f"BertForMaskedLM load: missing {len(result.missing_keys)} (tied to loaded weights: {tied}; buffers: "
          f"{buffer_missing}), unexpected {list(result.unexpected_keys)}")
    if model.cls.predictions.decoder.weight is not model.bert.embeddings.word_embeddings.weight:
        problems.append("BertForMaskedLM: the decoder weight is not tied to the word embeddings")
    s = batch["tokens"].shape[1]
    mask = (torch.arange(s)[None, :] < batch["lengths"][:, None]).long()
    out = model(input_ids=batch["tokens"], token_type_ids=batch["types"], attention_mask=mask,
                labels=batch["targets"])
    out.loss.backward()
    loss_hf = out.loss.item()
    err = abs(loss_hf - loss_pd) / max(1.0, abs(loss_pd))
    ok = err <= HF_LOSS_TOL
    # Also the gradients (the tied decoder's share lands in the word table's gradient as in pd2bw).
    gworst = ("-", -1.0)
    for name, ref in grads.items():
        got = by_name[name].grad
        gerr = (got - ref.double()).abs().max().item() / max(1.0, ref.double().abs().max().item())
        if not gerr <= gworst[1]:
            gworst = (name, gerr)
    print(f"BertForMaskedLM ({path.name}): loss hf {loss_hf:.17g}  pd2bw {loss_pd:.17g}  error {err:.3e} "
          f"(tol {HF_LOSS_TOL:g}) {'ok' if ok else 'FAIL'}; worst gradient {gworst[0]} {gworst[1]:.3e} "
          f"{'ok' if gworst[1] <= HF_LOSS_TOL else 'FAIL'}")
    if not ok:
        problems.append(f"BertForMaskedLM loss {loss_hf!r} vs pd2bw {loss_pd!r}: error {err:.3e}")
    if not gworst[1] <= HF_LOSS_TOL:
        problems.append(f"BertForMaskedLM gradient {gworst[0]}: error {gworst[1]:.3e} > {HF_LOSS_TOL:g}")
    return problems


def main():
    if len(sys.argv) != 2:
        print("usage: bert_parity.py DIR", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    root = pathlib.Path(sys.argv[1])
    files = sorted(root.glob("bert_*.safetensors"))
    if not files:
        print(f"bert_parity: no bert_*.safetensors in {root}", file=sys.stderr)
        return 1
    failures = []
    print(f"{'case':<10} {'loss pd2bw':>22} {'loss torch':>22} {'tol':>6}  worst gradient (error)")
    for path in files:
        cfg, loss_pd, loss_t, (worst, err), problems = check_case(path)
        case = f"{cfg['ln']}-{cfg['dtype']}"
        print(f"{case:<10} {loss_pd:>22.17g} {loss_t:>22.17g} {TOL[cfg['dtype']]:>6g}  {worst} ({err:.3e})"
              f"  {'ok' if not problems else 'FAIL'}")
        failures += [f"{path.name}: {p}" for p in problems]
    post64 = root / "bert_post_f64.safetensors"
    if post64.exists():
        failures += [f"{post64.name}: {p}" for p in check_transformers(post64)]
    else:
        failures.append("no bert_post_f64.safetensors for the transformers check")
    for f in failures[:12]:
        print("FAIL " + f)
    if len(failures) > 12:
        print(f"... and {len(failures) - 12} more failures")
    print("bert parity: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
