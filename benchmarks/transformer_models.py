"""The transformer models ``bench_transformers.py`` measures, built into a folder the caller owns.

* ``rxnmap``: chython-rxnmap's BERT-like encoder (a TorchScript export, opset 17), taken from the
  package's wheel: ``pip download --no-deps`` then the ``chython_rxnmap/rxnmap.onnx`` member. With a
  cache folder the file is kept there and the download skipped the next time.
* the test decoders and encoders of ``onnxscript.rewriter.models`` (dynamo-export forms): their
  ``make_model_with_random_weights()`` writes every weight as a ``Constant`` node. They are stored
  as exporters store them: each Constant of 1 KB or more becomes an initializer of the same name,
  and the initializers go to one external data file beside the model. Weights are drawn from
  numpy's global generator, seeded first so every build is the same model.

What the benchmark feeds them is set here too: dims whose sizes must agree (:data:`DIMS`) and
inputs that take the values a real caller gives (:data:`FEEDS`).

    python benchmarks/transformer_models.py NAME -o MODEL.onnx [--cache DIR]
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

RXNMAP_REQUIREMENT = "chython-rxnmap==2.0"
"""The release whose encoder the issue's numbers describe (1,411 nodes)."""
RXNMAP_MEMBER = "chython_rxnmap/rxnmap.onnx"

ONNXSCRIPT_MODELS = {
    "smollm_1": "_smollm_1",
    "phi2lm": "_phi2lm",
    "smollm_2": "_smollm_2",
    "whisper_encoder": "_whisper_encoder",
    "bart_encoder": "_bart_encoder",
}
"""Model name -> module of ``onnxscript.rewriter.models``."""
MODEL_NAMES = ("rxnmap", *ONNXSCRIPT_MODELS)

CONSTANT_TO_INITIALIZER_BYTES = 1024
"""Constants this large or larger become initializers, and initializers this large go to the data file."""

DIMS: dict[str, dict[str, int]] = {
    # The attention mask is as long as the new tokens and the cache together, a dim of its own name.
    "phi2lm": {"s34": 1, "s16": 8, "s62": 16, "s16 + s62": 24},
}
"""Sizes of dynamic input dims that must agree in a way the names do not say; others are searched."""

FEEDS: dict[str, dict[str, str]] = {
    "smollm_1": {"input1": "ones", "input2": "positions"},
    "smollm_2": {"position_ids": "positions"},
    "phi2lm": {"attention_mask": "ones"},
}
"""Inputs given the values onnxscript's own tests feed instead of random ones: ``ones`` for an attention
mask (nothing padded), ``positions`` 0, 1, 2, … along the last axis for position ids. Random position ids
are not what a decoder sees, and onnxruntime's RotaryEmbedding refuses some of them ("Updating cos_cache
and sin_cache in RotaryEmbedding is not currently supported")."""


def with_feeds(inputs: dict, feeds: dict[str, str]) -> dict:
    """``inputs`` with those named in ``feeds`` replaced (see :data:`FEEDS`)."""
    import numpy as np

    replaced = dict(inputs)
    for name, kind in feeds.items():
        if name not in inputs:
            continue
        array = inputs[name]
        if kind == "ones":
            replaced[name] = np.ones_like(array)
        elif kind == "positions":
            replaced[name] = np.broadcast_to(np.arange(array.shape[-1]), array.shape).astype(array.dtype)
    return replaced


def build(name: str, output: Path, cache: Path | None = None) -> Path:
    """Write model ``name`` to ``output`` (and, for onnxscript's, ``output.name + '.data'`` beside it)."""
    if name == "rxnmap":
        return _rxnmap(output, cache)
    if name in ONNXSCRIPT_MODELS:
        return _onnxscript_model(ONNXSCRIPT_MODELS[name], output)
    raise ValueError(f"unknown model '{name}'; models: {', '.join(MODEL_NAMES)}")


def _rxnmap(output: Path, cache: Path | None) -> Path:
    cached = cache / "rxnmap.onnx" if cache is not None else None
    if cached is not None and cached.exists():
        shutil.copyfile(cached, output)
        return output
    with tempfile.TemporaryDirectory(dir=output.parent) as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", RXNMAP_REQUIREMENT,
                        "-d", scratch], check=True, stdout=subprocess.DEVNULL)
        wheel = next(Path(scratch).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive, archive.open(RXNMAP_MEMBER) as source, open(output, "wb") as target:
            shutil.copyfileobj(source, target)
    if cached is not None:
        cache.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(output, cached)
    return output


def _onnxscript_model(module_name: str, output: Path) -> Path:
    import numpy as np
    import onnx

    np.random.seed(0)
    module = importlib.import_module(f"onnxscript.rewriter.models.{module_name}")
    model = module.make_model_with_random_weights()
    if not isinstance(model, onnx.ModelProto):  # an onnx_ir Model
        import onnx_ir as ir

        model = ir.serde.serialize_model(model)
    constants_to_initializers(model.graph, CONSTANT_TO_INITIALIZER_BYTES)
    onnx.save(model, str(output), save_as_external_data=True, all_tensors_to_one_file=True,
              location=f"{output.name}.data", size_threshold=CONSTANT_TO_INITIALIZER_BYTES)
    return output


def constants_to_initializers(graph, min_bytes: int) -> int:
    """Main-graph Constant nodes holding a tensor of ``min_bytes`` or more become initializers named as
    their output; returns how many. Each node is dropped once its tensor is copied, so the weights are
    never held twice over."""
    position = {node.output[0]: index for index, node in enumerate(graph.node) if node.output}
    moved = 0
    for index in reversed(range(len(graph.node))):
        node = graph.node[index]
        tensor = _constant_tensor(node)
        if tensor is None or _tensor_bytes(tensor) < min_bytes:
            continue
        initializer = graph.initializer.add()
        initializer.CopyFrom(tensor)
        initializer.name = node.output[0]
        del node, tensor  # no Python reference left: deleting the node frees its tensor instead of copying it out
        del graph.node[index]
        moved += 1
    graph.initializer.sort(key=lambda t: position.get(t.name, -1))  # in the order the graph computed them
    return moved


def _constant_tensor(node):
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return None
    for attribute in node.attribute:
        if attribute.name == "value":
            return attribute.t
    return None


def _tensor_bytes(tensor) -> int:
    import onnx

    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=MODEL_NAMES)
    parser.add_argument("-o", "--output", type=Path, required=True)
    parser.add_argument("--cache", type=Path, help="keep downloads here (rxnmap's wheel member)")
    args = parser.parse_args()
    build(args.name, args.output, args.cache)


if __name__ == "__main__":
    main()
