"""Small transformer models as today's ONNX exporters write them: a corpus for ``bench_exporters.py``.

Each model is a Hugging Face architecture built from a config object with random weights (seed 0;
hidden size 64, 2 layers, 4 attention heads, 2 key/value heads where the architecture groups them,
intermediate size 128, vocabulary 1,000, 128 positions), saved with ``save_pretrained`` beside a tiny
tokenizer trained on a few sentences (and an image or audio processor where the model reads one), so
every exporter reads the same weights. Then each exporter writes ``OUT/<model>/<exporter>/model.onnx``:

* ``torchscript``: ``torch.onnx.export(dynamo=False, opset_version=17)``, dynamic batch and sequence;
* ``dynamo``: ``torch.onnx.export(dynamo=True)``, the same inputs and dynamic dims;
* ``optimum``: optimum's exporter from the saved folder (decoders with their KV cache,
  ``text-generation-with-past``; of an encoder-decoder, the encoder);
* ``genai-fp32``, ``genai-int4``: onnxruntime-genai's model builder (decoders it supports, CPU).

The torch exports take the model's own inputs (``input_ids``, ``attention_mask``, and ``token_type_ids``
or ``position_ids`` where the model reads them; ``pixel_values`` for ViT, ``input_features`` for
Whisper) and return its first output (logits or the last hidden state), without a KV cache.

optimum-onnx pins transformers below 4.58 while the model builder needs transformers 5: give optimum an
environment of its own (``--optimum-python``); the saved folder is one both read (its tokenizer is named
``PreTrainedTokenizerFast``).

``OUT/manifest.json`` lists every model × exporter: its path, whether it was written (else the failure
in one line; the exporter's full output is in ``log.txt`` beside it), the graph's input names, its node
count and op-type histogram (``domain:Op`` for ops outside the default domain); and per model the
dims a fusion tool needs (``model_type``, heads, hidden size).

    pip install torch transformers onnxruntime-genai onnxscript onnxruntime   # and, in another venv, optimum-onnx
    python benchmarks/exporter_models.py --out DIR [--models bert,llama,...]
        [--exporters torchscript,dynamo,optimum,genai-fp32,genai-int4] [--optimum-python OTHER_VENV/bin/python]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_transformers import error_line

SIZES: dict[str, Any] = {
    "vocab_size": 1000,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 128,
}
"""The common config of the BERT-like and Llama-like models; the others spell the same sizes their own way."""
SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
"""Special token ids, as the tokenizer numbers them (:data:`SPECIAL_TOKENS`)."""
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
DECODER = {**SIZES, **SPECIAL, "num_key_value_heads": 2, "head_dim": 16}
SEQ2SEQ = {
    "vocab_size": 1000,
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    **SPECIAL,
    "decoder_start_token_id": 1,
}
BATCH, SEQUENCE = 2, 8
"""Sizes of the sample inputs the torch exports trace with."""
IMAGE, PATCH, MELS, FRAMES = 32, 8, 80, 128
"""ViT's image and patch size; Whisper's mel bins and frames (twice its 64 source positions)."""
SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "a small model with random weights",
    "attention is all you need",
    "hello world, this is a tokenizer trained on a few sentences",
)
EXPORTERS = ("torchscript", "dynamo", "optimum", "genai-fp32", "genai-int4")
LIMIT = 900.0
"""Seconds before an exporter's process is stopped."""


@dataclass(frozen=True)
class Spec:
    """One architecture: its config, the class saved, what the torch exports feed it and which exporters apply."""

    config_class: str
    config: dict[str, Any]
    model_class: str
    inputs: tuple[str, ...]
    task: str
    kind: str = "text"
    """``text``, ``decoder``, ``encoder`` (the encoder of an encoder-decoder), ``vision`` or ``speech``."""
    optimum_args: tuple[str, ...] = ()


MODELS: dict[str, Spec] = {
    "bert": Spec(
        "BertConfig", SIZES, "BertModel", ("input_ids", "attention_mask", "token_type_ids"), "feature-extraction"
    ),
    "distilbert": Spec(
        "DistilBertConfig",
        {"vocab_size": 1000, "dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 128, "max_position_embeddings": 128},
        "DistilBertModel",
        ("input_ids", "attention_mask"),
        "feature-extraction",
    ),
    "gpt2": Spec(
        "GPT2Config",
        {"vocab_size": 1000, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 128, "n_positions": 128, **SPECIAL},
        "GPT2LMHeadModel",
        ("input_ids", "attention_mask", "position_ids"),
        "text-generation-with-past",
        "decoder",
    ),
    "llama": Spec(
        "LlamaConfig",
        DECODER,
        "LlamaForCausalLM",
        ("input_ids", "attention_mask", "position_ids"),
        "text-generation-with-past",
        "decoder",
    ),
    "qwen2": Spec(
        "Qwen2Config",
        DECODER,
        "Qwen2ForCausalLM",
        ("input_ids", "attention_mask", "position_ids"),
        "text-generation-with-past",
        "decoder",
    ),
    "qwen3": Spec(
        "Qwen3Config",
        DECODER,
        "Qwen3ForCausalLM",
        ("input_ids", "attention_mask", "position_ids"),
        "text-generation-with-past",
        "decoder",
    ),
    "mistral": Spec(
        "MistralConfig",
        DECODER,
        "MistralForCausalLM",
        ("input_ids", "attention_mask", "position_ids"),
        "text-generation-with-past",
        "decoder",
    ),
    "phi3": Spec(
        "Phi3Config",
        {**DECODER, "original_max_position_embeddings": 128},
        "Phi3ForCausalLM",
        ("input_ids", "attention_mask", "position_ids"),
        "text-generation-with-past",
        "decoder",
    ),
    "gemma": Spec(
        "GemmaConfig",
        DECODER,
        "GemmaForCausalLM",
        ("input_ids", "attention_mask", "position_ids"),
        "text-generation-with-past",
        "decoder",
    ),
    "t5_encoder": Spec(
        "T5Config",
        {
            "vocab_size": 1000,
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 128,
            "num_layers": 2,
            "num_heads": 4,
            "pad_token_id": 0,
            "eos_token_id": 2,
            "decoder_start_token_id": 0,
        },
        "T5Model",
        ("input_ids", "attention_mask"),
        "text2text-generation",
        "encoder",
    ),
    "bart_encoder": Spec(
        "BartConfig",
        {**SEQ2SEQ, "max_position_embeddings": 128},
        "BartModel",
        ("input_ids", "attention_mask"),
        "text2text-generation",
        "encoder",
    ),
    "whisper_encoder": Spec(
        "WhisperConfig",
        {
            **SEQ2SEQ,
            "num_mel_bins": MELS,
            "max_source_positions": FRAMES // 2,
            "max_target_positions": 128,
            "suppress_tokens": [],
            "begin_suppress_tokens": [],
        },
        "WhisperForConditionalGeneration",
        ("input_features",),
        "automatic-speech-recognition",
        "speech",
        ("--nb_max_frames", str(FRAMES)),
    ),
    "vit": Spec(
        "ViTConfig",
        {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 128,
            "image_size": IMAGE,
            "patch_size": PATCH,
        },
        "ViTModel",
        ("pixel_values",),
        "image-feature-extraction",
        "vision",
    ),
}
"""Model name -> its architecture."""

ORT_MODEL_TYPES = {
    "bert": "bert",
    "distilbert": "bert",
    "gpt2": "gpt2",
    "t5_encoder": "t5",
    "bart_encoder": "bart",
    "whisper_encoder": "bart",
    "vit": "vit",
}
"""The ``model_type`` onnxruntime's transformers optimizer is given (its Llama-like scripts use ``gpt2``)."""


@dataclass
class Entry:
    """One model × exporter in the manifest."""

    path: str
    ok: bool = False
    reason: str = ""
    seconds: float | None = None
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    dims: dict[str, list[str | int]] = field(default_factory=dict)
    opsets: dict[str, int] = field(default_factory=dict)
    nodes: int | None = None
    ops: dict[str, int] = field(default_factory=dict)
    note: str = ""


# ---------------------------------------------------------------- the saved folder every exporter reads


def build_folder(name: str, folder: Path) -> None:
    """Model ``name`` with random weights (seed 0), its tokenizer or processor, saved in ``folder``."""
    import torch
    import transformers

    spec = MODELS[name]
    torch.manual_seed(0)
    config = getattr(transformers, spec.config_class)(**spec.config)
    model = getattr(transformers, spec.model_class)(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    if spec.kind == "vision":
        transformers.ViTImageProcessor(size={"height": IMAGE, "width": IMAGE}).save_pretrained(folder)
    elif spec.kind == "speech":
        transformers.WhisperFeatureExtractor(
            feature_size=MELS, chunk_length=1, n_samples=FRAMES * 160, nb_max_frames=FRAMES
        ).save_pretrained(folder)
    else:
        tokenizer().save_pretrained(folder)
        # named as transformers 4 calls it, which 5 reads too: optimum's exporter pins transformers 4
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n")


def tokenizer() -> Any:
    """A byte-level BPE tokenizer trained on :data:`SENTENCES`, its special tokens numbered as :data:`SPECIAL`."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(SENTENCES, vocab_size=320, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    pad, bos, eos, unk = SPECIAL_TOKENS
    with tempfile.TemporaryDirectory(prefix="tokenizer_") as scratch:
        bpe.save(str(Path(scratch) / "tokenizer.json"))
        return PreTrainedTokenizerFast(
            tokenizer_file=str(Path(scratch) / "tokenizer.json"),
            pad_token=pad,
            bos_token=bos,
            eos_token=eos,
            unk_token=unk,
            model_max_length=SIZES["max_position_embeddings"],
        )


# ---------------------------------------------------------------- the torch exports (each in a process of its own)

ALL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "pixel_values", "input_features")
"""The inputs a torch export may take, in the order of its graph inputs."""


def torch_export(exporter: str, name: str, folder: str, output: str) -> None:
    """Export the model saved in ``folder`` with ``torch.onnx.export`` (TorchScript or dynamo) to ``output``."""
    import torch

    spec = MODELS[name]
    inputs = sample_inputs(spec)
    axes = {input_name: _dynamic_axes(input_name) for input_name in inputs}
    output_name = "logits" if spec.kind == "decoder" else "last_hidden_state"
    axes[output_name] = {0: "batch"} if spec.kind in ("vision", "speech") else {0: "batch", 1: "sequence"}
    options: dict[str, Any] = {"kwargs": inputs, "input_names": list(inputs), "output_names": [output_name]}
    if exporter == "torchscript":
        options.update(dynamic_axes=axes, opset_version=17, dynamo=False)
    else:  # one Dim per name, so every input's batch (and sequence) is the same symbol
        named = {label: torch.export.Dim(label) for label in ("batch", "sequence")}
        shapes = {k: {axis: named[label] for axis, label in axes[k].items()} for k in inputs}
        options.update(dynamic_shapes=shapes, dynamo=True)
    with torch.no_grad():
        torch.onnx.export(first_output(name, folder), (), output, **options)


def first_output(name: str, folder: str) -> Any:
    """The saved model (its encoder, of an encoder-decoder) returning its first output alone. Its class is
    swapped for a subclass rather than wrapped, so its nodes are named as in an export of the model itself."""
    import transformers

    spec = MODELS[name]
    options = {"use_cache": False} if spec.kind == "decoder" else {}
    model = getattr(transformers, spec.model_class).from_pretrained(folder, **options).eval()
    core = model.get_encoder() if spec.kind in ("encoder", "speech") else model
    base = type(core)

    class FirstOutput(base):  # type: ignore[misc, valid-type]
        def forward(
            self,
            input_ids: Any = None,
            attention_mask: Any = None,
            token_type_ids: Any = None,
            position_ids: Any = None,
            pixel_values: Any = None,
            input_features: Any = None,
        ) -> Any:
            values = (input_ids, attention_mask, token_type_ids, position_ids, pixel_values, input_features)
            given = {k: v for k, v in zip(ALL_INPUTS, values) if v is not None}
            return base.forward(self, **given, return_dict=False)[0]

    core.__class__ = FirstOutput
    return core


def sample_inputs(spec: Spec) -> dict[str, Any]:
    """What the torch exports trace with, in :data:`ALL_INPUTS` order."""
    import torch

    generator = torch.Generator().manual_seed(0)
    shape = (BATCH, SEQUENCE)
    made = {
        "input_ids": lambda: torch.randint(len(SPECIAL_TOKENS), 1000, shape, generator=generator),
        "attention_mask": lambda: torch.ones(shape, dtype=torch.int64),
        "token_type_ids": lambda: torch.zeros(shape, dtype=torch.int64),
        "position_ids": lambda: torch.arange(SEQUENCE).expand(shape).clone(),
        "pixel_values": lambda: torch.randn((BATCH, 3, IMAGE, IMAGE), generator=generator),
        "input_features": lambda: torch.randn((BATCH, MELS, FRAMES), generator=generator),
    }
    return {k: made[k]() for k in ALL_INPUTS if k in spec.inputs}


def _dynamic_axes(input_name: str) -> dict[int, str]:
    """Batch and sequence, but only batch for images and audio features (their sizes are fixed by the config)."""
    return {0: "batch"} if input_name in ("pixel_values", "input_features") else {0: "batch", 1: "sequence"}


# ---------------------------------------------------------------- running the exporters


def exporters_of(name: str) -> tuple[str, ...]:
    """The exporters that apply to model ``name``: the model builder writes decoders alone."""
    decoder = MODELS[name].kind == "decoder"
    return tuple(e for e in EXPORTERS if decoder or not e.startswith("genai"))


def command(name: str, exporter: str, folder: Path, target: Path, scratch: Path, optimum_python: str) -> list[str]:
    """The process that writes model ``name``'s export by ``exporter`` into folder ``target``."""
    spec = MODELS[name]
    if exporter in ("torchscript", "dynamo"):
        script = (
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            f"from benchmarks.exporter_models import {torch_export.__name__} as export\nexport(*sys.argv[1:])\n"
        )
        return [sys.executable, "-c", script, exporter, name, str(folder), str(target / "model.onnx")]
    if exporter == "optimum":
        return [
            optimum_python,
            "-m",
            "optimum.exporters.onnx",
            "--model",
            str(folder),
            "--task",
            spec.task,
            *spec.optimum_args,
            str(target),
        ]
    precision = exporter.removeprefix("genai-")
    return [
        sys.executable,
        "-m",
        "onnxruntime_genai.models.builder",
        "-i",
        str(folder),
        "-o",
        str(target),
        "-p",
        precision,
        "-e",
        "cpu",
        "-c",
        str(scratch),
    ]


def export(name: str, exporter: str, out: Path, optimum_python: str) -> Entry:
    """Run one exporter on model ``name``'s saved folder; whatever happens, an entry saying so."""
    target = out / name / exporter
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    entry = Entry(str((target / "model.onnx").relative_to(out)))
    log = out / name / f"{exporter}.log"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="exporter_") as scratch, open(log, "wb") as output:
        cmd = command(name, exporter, out / name / "hf", target, Path(scratch), optimum_python)
        try:
            done = subprocess.run(cmd, stdout=output, stderr=subprocess.STDOUT, cwd=scratch, timeout=LIMIT)
        except subprocess.TimeoutExpired:
            entry.reason = f"stopped after {LIMIT:.0f} s"
            return entry
    entry.seconds = round(time.perf_counter() - started, 1)
    shutil.move(log, target / "log.txt")
    if done.returncode != 0:
        entry.reason = error_line((target / "log.txt").read_text(errors="replace")) or f"exit code {done.returncode}"
        return entry
    encoder = target / "encoder_model.onnx"
    if exporter == "optimum" and encoder.exists() and not (target / "model.onnx").exists():
        encoder.rename(target / "model.onnx")  # its external data, if any, keeps the name the model refers to
        entry.note = "optimum's encoder_model.onnx (its decoder beside it)"
    describe(entry, target / "model.onnx")
    return entry


def describe(entry: Entry, path: Path) -> None:
    """The entry's inputs, outputs, node count and op histogram, read from the saved model."""
    import onnx

    if not path.exists():
        entry.reason = f"the exporter wrote no {path.name}: {', '.join(sorted(p.name for p in path.parent.iterdir()))}"
        return
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # a protobuf decode error or an OSError, in one line
        entry.reason = f"cannot be read: {type(exc).__name__}: {exc}"[:200]
        return
    weights = {t.name for t in model.graph.initializer}
    entry.inputs = [v.name for v in model.graph.input if v.name not in weights]
    entry.dims = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in model.graph.input
        if v.name not in weights
    }
    entry.outputs = [v.name for v in model.graph.output]
    entry.opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    entry.nodes = len(model.graph.node)
    ops = Counter(f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in model.graph.node)
    entry.ops = dict(ops.most_common())
    entry.ok = True


# ---------------------------------------------------------------- the manifest


def model_facts(name: str, out: Path) -> dict[str, Any]:
    """What a fusion tool is told about model ``name``: its architecture, heads and hidden size."""
    config = json.loads((out / name / "hf" / "config.json").read_text())
    spec = MODELS[name]
    heads = next(
        config[k]
        for k in ("num_attention_heads", "n_heads", "n_head", "num_heads", "encoder_attention_heads")
        if k in config
    )
    hidden = next(config[k] for k in ("hidden_size", "dim", "n_embd", "d_model") if k in config)
    return {
        "folder": f"{name}/hf",
        "architecture": spec.model_class,
        "kind": spec.kind,
        "ort_model_type": ORT_MODEL_TYPES.get(name, "gpt2"),
        "num_heads": heads,
        "hidden_size": hidden,
        "num_key_value_heads": config.get("num_key_value_heads", heads),
    }


def versions(optimum_python: str) -> dict[str, str]:
    """The versions of the exporters' packages (optimum's from its own interpreter)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("torch", "transformers", "onnxruntime-genai", "onnxscript", "onnx", "onnxruntime"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    script = "from importlib.metadata import version as v; print(v('optimum-onnx'), v('transformers'), v('torch'))"
    done = subprocess.run([optimum_python, "-c", script], capture_output=True, text=True)
    optimum = done.stdout.split() if done.returncode == 0 else ["not installed"] * 3
    found["optimum-onnx"] = f"{optimum[0]} (transformers {optimum[1]}, torch {optimum[2]})"
    return found


def write_manifest(
    out: Path, facts: dict[str, dict], entries: dict[tuple[str, str], Entry], found: dict[str, str]
) -> None:
    """``out/manifest.json``; entries of models not rebuilt this time are kept from the last one."""
    path = out / "manifest.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    models = {**old.get("models", {}), **facts}
    rows = {(e["model"], e["exporter"]): e for e in old.get("entries", [])}
    rows.update({key: {"model": key[0], "exporter": key[1], **asdict(entry)} for key, entry in entries.items()})
    order = {name: i for i, name in enumerate(MODELS)}
    ranked = sorted(rows.values(), key=lambda e: (order.get(e["model"], len(order)), EXPORTERS.index(e["exporter"])))
    manifest = {
        "versions": found,
        "models": {k: models[k] for k in sorted(models, key=lambda k: order.get(k, 99))},
        "entries": ranked,
    }
    path.write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the corpus folder (manifest.json at its root)")
    parser.add_argument("--models", default="all", help=f"comma-separated, of: {', '.join(MODELS)} (or 'all')")
    parser.add_argument("--exporters", default=",".join(EXPORTERS), help="comma-separated, of: " + ", ".join(EXPORTERS))
    parser.add_argument(
        "--optimum-python",
        default=sys.executable,
        help="the interpreter that has optimum-onnx (it pins transformers < 4.58)",
    )
    args = parser.parse_args()
    names = list(MODELS) if args.models == "all" else [m.strip() for m in args.models.split(",") if m.strip()]
    chosen = [e.strip() for e in args.exporters.split(",") if e.strip()]
    unknown = [m for m in names if m not in MODELS] + [e for e in chosen if e not in EXPORTERS]
    if unknown:
        parser.error(f"unknown model or exporter '{unknown[0]}'")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    facts, entries = {}, {}
    for name in names:
        entries.update(build_and_export(name, [e for e in exporters_of(name) if e in chosen], out, args))
        if (out / name / "hf" / "config.json").exists():
            facts[name] = model_facts(name, out)
        write_manifest(out, facts, entries, versions(args.optimum_python))
    failed = [f"{m} {e}: {entry.reason}" for (m, e), entry in entries.items() if not entry.ok]
    print(f"{len(entries) - len(failed)} of {len(entries)} written; manifest {out / 'manifest.json'}")
    print("\n".join(failed))


def build_and_export(
    name: str, exporters: list[str], out: Path, args: argparse.Namespace
) -> dict[tuple[str, str], Entry]:
    """Save model ``name``'s folder, then run each exporter on it."""
    entries: dict[tuple[str, str], Entry] = {}
    try:
        shutil.rmtree(out / name / "hf", ignore_errors=True)
        build_folder(name, out / name / "hf")
    except Exception as exc:  # whatever transformers raises for a config it refuses
        reason = f"building the model failed: {type(exc).__name__}: {exc}"[:200]
        traceback.print_exc()
        return {(name, e): Entry(f"{name}/{e}/model.onnx", reason=reason) for e in exporters}
    for exporter in exporters:
        entry = entries[name, exporter] = export(name, exporter, out, args.optimum_python)
        state = "ok" if entry.ok else f"FAILED: {entry.reason}"
        nodes = entry.nodes if entry.nodes is not None else "-"
        print(f"{name:16} {exporter:12} {entry.seconds or 0:6.1f} s  nodes {nodes:>5}  {state}", flush=True)
    return entries


if __name__ == "__main__":
    main()
