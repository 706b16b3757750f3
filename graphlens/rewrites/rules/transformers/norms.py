"""fuse-skip-norm and fuse-rms-norm: the norms of a transformer block, fused into one op each.

RMS normalization over the last axis of x, with scale γ::

    y = x / √(mean(x²) + ε) · γ

fuse-rms-norm replaces it by ``RMSNormalization(x, γ, axis=-1, epsilon=ε)`` where the model's
opset has it (23), else by ``SkipSimplifiedLayerNormalization(x, x, γ, epsilon=4ε)`` of
``com.microsoft``, which normalizes the sum s = x + x = 2x::

    2x / √(mean((2x)²) + 4ε) = 2x / (2·√(mean(x²) + ε)) = x / √(mean(x²) + ε)

exactly in floating point too, since doubling and quadrupling only change the exponent (an x
within a factor 2 of its type's largest value would overflow; no activation is that large).
Why not onnxruntime's ``SimplifiedLayerNormalization``, as onnxscript writes: onnxruntime
registers it in ONNX's default domain, where the ONNX checker finds no such op and rejects the
model, and does not run it in ``com.microsoft``. The skip op with x twice is the one form both
accept. Its cost, onnxruntime 1.32 CPU, one thread, float32, hidden size 2048: 0.8× the unfused
exporter form for one token, 1.3× for 32, 1.4× for 512 (the default-domain op and
``RMSNormalization`` take 0.4× to 0.7×); GPU providers run it as one kernel. In a decoder only
the first norm is such a lone one: the others follow a residual Add and become skip ops.

fuse-skip-norm takes a residual ``s = a + b`` (``a`` possibly ``p + bias``, a projection's
bias) and the norm that reads s — LayerNormalization, RMSNormalization, onnxruntime's
SimplifiedLayerNormalization, the decomposed forms, or the skip op above — and writes
``SkipLayerNormalization(a, b, γ, β, bias)`` or ``SkipSimplifiedLayerNormalization(a, b, γ, bias)``;
both compute ``s = a + b + bias`` and normalize it. When later nodes read s too (the next
residual), the fused op's output 3, ``input_skip_bias_sum``, takes s's name and serves them.
onnxruntime's kernels take a and b of one type (float or float16) and, here, of one shape of
rank 2 or 3 (see :func:`_skip_fits`); other residuals are left alone. On the
CPU provider the skip kernels are no faster than the Add and the norm apart (0.7× for one token,
1.1× for 32 to 512 for RMS; onnxruntime itself turns Add + LayerNormalization into the same
SkipLayerNormalization); they are written for CUDA and DirectML.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.types import Dim
from graphlens.matching.match import Match
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site, fresh_name, shape_text
from graphlens.rewrites.rules.fusion import MS_DOMAIN, Fused, Fusion, TargetOp, target_op
from graphlens.rewrites.rules.transformers.common import written_by
from graphlens.rewrites.rules.transformers.graph_dims import dims_of, dtype_of, rank_of

SKIP_DTYPES = ("float32", "float16")
"""What onnxruntime's skip kernels take (one type for input, skip, gamma, beta and bias)."""
RMS_DTYPES = ("float32", "float16", "float64")
"""What RMSNormalization takes where onnxruntime runs it (its function body has no bfloat16 Mul on CPU)."""
SKIP_RANKS = (2, 3)
DEFAULT_EPSILON = {"LayerNormalization": 1e-5, "RMSNormalization": 1e-5, "SimplifiedLayerNormalization": 1e-5,
                   "SkipSimplifiedLayerNormalization": 1e-12}


# --------------------------------------------------------------------------- reading a match
class Parts:
    """What a fusion collects from a match: new constants and Casts it needs, and fresh names."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.graph = site.graph
        self.before: list[onnx.NodeProto] = []
        self.taken: set[str] = set()
        self.types: dict[str, str] = {}
        """Element types of the tensors the fused node's new nodes give."""

    def fresh(self, base: str) -> str:
        name = fresh_name(self.graph, base, self.taken)
        while name in self.graph.by_name:
            name = fresh_name(self.graph, base, self.taken)
        return name

    def constant(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        tensor = onnx.numpy_helper.from_array(np.ascontiguousarray(value), name)
        self.before.append(onnx.helper.make_node("Constant", [], [name], name=name, value=tensor))
        self.types[name] = str(value.dtype)
        return name

    def cast(self, tensor: str, dtype: str, base: str) -> str:
        name = self.fresh(base)
        to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self.before.append(onnx.helper.make_node("Cast", [tensor], [name], name=name, to=to))
        self.types[name] = dtype
        return name

    def dtype(self, tensor: str) -> str | None:
        return self.types.get(tensor) or dtype_of(self.graph, tensor)

    def vector(self, label: str, like: str | None, length: int | None, what: str, reader: Node) -> str | Refusal:
        """The constant ``label`` as a 1-D tensor of ``length`` over the last axis, in the type of
        the CastLike ``like`` that reads it (if the match has one): the tensor itself when it already
        is one, else a new Constant."""
        site = self.site
        tensor = site.value(label)
        value = site.const(label)
        if value is None:
            why = self.graph.why_not_constant(tensor)
            if why is not None:
                return site.refuse(f"{reader.label} reads {what} '{tensor}', which {why}")
            return site.missing(reader, (label,)) or site.refuse(f"{what} '{tensor}' of {reader.label} has no value")
        like_node = site.node(like) if like else None
        dtype = self.dtype(like_node.outputs[0]) if like_node is not None else str(value.dtype)
        vector = np.asarray(value)
        while vector.ndim > 1 and vector.shape[0] == 1:
            vector = vector[0]
        vector = vector.reshape(1) if vector.ndim == 0 else vector
        if vector.ndim != 1 or (length is not None and vector.size not in (1, length)):
            over = f" of size {length}" if length is not None else ""
            return site.refuse(f"{reader.label} reads {what} '{tensor}' of shape {shape_text(value.shape)}, "
                               f"not a vector over the last axis{over}")
        if length is not None and vector.size == 1 and length > 1:
            vector = np.full(length, vector[0])
        if vector.shape == value.shape and dtype == str(value.dtype):
            return tensor  # the CastLike, if any, changes nothing
        if dtype is None or dtype not in RMS_DTYPES:
            return site.refuse(f"{like_node.label if like_node else reader.label} gives {what} the type {dtype}, "
                               "which the fused op does not take")
        return self.constant(f"{tensor}_vector", vector.astype(dtype))


def last_dim(site: Site, tensor: str) -> int | None:
    shape = dims_of(site.graph, tensor)  # also where shape inference stopped (a heads split of computed shape)
    return shape[-1] if shape and isinstance(shape[-1], int) else None


def reduced_axes(site: Site, node: Node, label: str) -> list[int] | Refusal:
    """The axes a ReduceMean reduces (from its attribute, before opset 18, or its input), as listed."""
    if int(node.attrs.get("keepdims", 1)) != 1:
        return site.refuse(f"{node.label} drops the reduced axes (keepdims=0)")
    axes = node.attrs.get("axes")
    if axes is None and site.tensor(label) is not None:
        axes = site.const(label)
        if axes is None:
            return site.missing(node, (label,)) or site.refuse(f"{node.label} has axes without a value")
    if axes is None:
        return site.refuse(f"{node.label} reduces over all axes, not the last one alone")
    return sorted(int(a) for a in np.asarray(axes).reshape(-1))


def over_last_axis(site: Site, node: Node, label: str, x: str) -> Refusal | None:
    """None when ``node`` (a ReduceMean of x's values) reduces over x's last axis alone."""
    axes = reduced_axes(site, node, label)
    if isinstance(axes, Refusal):
        return axes
    rank = rank_of(site.graph, x)
    if axes == [-1] or (rank is not None and axes == [rank - 1]):
        return None
    if rank is None and len(axes) == 1:
        return site.refuse(f"{node.label} reduces over axis {axes[0]} of '{x}', whose rank is unknown")
    return site.refuse(f"{node.label} reduces over axes {axes}, not the last axis alone")


def epsilon_of(site: Site, add: Node | None, label: str) -> float | Refusal:
    """The ε the Add ``add`` adds (0 where the exporter dropped it), as a float."""
    if add is None:
        return 0.0
    value = site.const(label)
    if value is None:
        return site.missing(add, (label,)) or site.refuse(f"{add.label} adds an ε without a value")
    if np.asarray(value).size != 1:
        return site.refuse(f"{add.label} adds an ε of shape {shape_text(np.shape(value))}, not a scalar")
    return float(np.asarray(value, np.float64).reshape(-1)[0])


def one_type(site: Site, parts: Parts, x: str, gamma: str) -> str | Refusal:
    """x in γ's type, which the fused op computes in: x itself, or x cast up where the match casts it
    up to γ's type (mixed precision); a refusal when x and γ differ otherwise."""
    have, want = parts.dtype(x), parts.dtype(gamma)
    if have is None or want is None:
        return site.refuse(f"the element type of '{x if have is None else gamma}' is unknown")
    if have == want:
        return x
    up, down = site.node("x_up"), site.node("normalized_down")
    if up is not None and parts.dtype(up.outputs[0]) == want:
        return parts.cast(x, want, f"{x}_as_{want}")
    cast = f"{down.label} casts the result to {want}" if down is not None else f"γ is {want}"
    return site.refuse(f"{cast} while '{x}' is {have}, and the fused op takes x and γ of one type")


def unused_extra_outputs(site: Site, node: Node) -> Refusal | None:
    """A refusal when something reads an output of ``node`` past the first (mean, inverse deviation)."""
    for slot, tensor in enumerate(node.outputs[1:], start=1):
        if tensor and (site.graph.consumers(tensor) or site.graph.is_graph_output(tensor)):
            return site.refuse(f"{node.label}'s output {slot} ('{tensor}') is read, and the fused op does not "
                               "give it")
    return None


# --------------------------------------------------------------------------- fuse-rms-norm
class FuseRmsNorm(Fusion):
    """RMS normalization in pieces → RMSNormalization (opset 23), else SkipSimplifiedLayerNormalization(x, x)."""

    name = "fuse-rms-norm"
    kind = "rms-norm"
    family = "RMS norm"
    fused_ops = ("SimplifiedLayerNormalization", "RMSNormalization", "SkipSimplifiedLayerNormalization")
    description = ("replace RMS normalization written in pieces by RMSNormalization (opset 23) or onnxruntime's "
                   "SkipSimplifiedLayerNormalization of x with itself (off by default)")
    pattern_names = ("rms-norm", "rms-norm-plain")

    def fuse(self, site: Site) -> Fused | Refusal:
        target = target_op(site, "RMSNormalization", "SkipSimplifiedLayerNormalization")
        assert isinstance(target, TargetOp)
        parts = Parts(site)
        x = site.value("x")
        found = over_last_axis(site, site.matched("mean_square"), "axes", x)
        if found is not None:
            return found
        epsilon = epsilon_of(site, site.node("with_eps"), "eps")
        if isinstance(epsilon, Refusal):
            return epsilon
        length = last_dim(site, x)
        out = site.matched("out")
        if site.tensor("gamma") is not None:
            gamma = parts.vector("gamma", "gamma_like", length, "γ", out)
        elif length is None:
            return site.refuse(f"the last axis of '{x}' has no fixed size, so {out.label} has no scale of ones "
                               "to fuse with")
        else:
            gamma = parts.constant(f"{out.name}_ones", np.ones(length, parts.dtype(out.outputs[0]) or "float32"))
        if isinstance(gamma, Refusal):
            return gamma
        x_in = one_type(site, parts, x, gamma)
        if isinstance(x_in, Refusal):
            return x_in
        dtype = parts.dtype(gamma)
        if target.domain == MS_DOMAIN:
            if dtype not in SKIP_DTYPES:
                return site.refuse(f"'{x}' is {dtype}, and SkipSimplifiedLayerNormalization takes float32 or float16")
            rank = rank_of(site.graph, x)
            if rank is None:
                return site.refuse(f"the rank of '{x}' is unknown, and below opset 23 (RMSNormalization) the fused "
                                   "ops need it: SkipSimplifiedLayerNormalization takes rank 2 or 3")
            if rank not in SKIP_RANKS:  # per-head norms (Qwen3's q_norm on [B, H, S, D]): onnxruntime's own op
                return Fused(TargetOp("SimplifiedLayerNormalization"), [x_in, gamma],
                             {"epsilon": epsilon, "axis": -1}, before=parts.before)
            return Fused(target, [x_in, x_in, gamma], {"epsilon": 4 * epsilon}, before=parts.before)
        if dtype not in RMS_DTYPES:
            return site.refuse(f"'{x}' is {dtype}, which onnxruntime's RMSNormalization does not run")
        attrs = {"axis": -1, "epsilon": epsilon, "stash_type": 1}
        return Fused(target, [x_in, gamma], attrs, before=parts.before)

    def plan(self, match: Match) -> Plan | Refusal:
        planned = super().plan(match)
        if isinstance(planned, Refusal) and match.pattern == "rms-norm-plain":
            return self._as_scaled_site(match, planned)
        return planned

    @staticmethod
    def _as_scaled_site(match: Match, refused: Refusal) -> Refusal:
        """A refusal of the plain normalization that a Mul (by γ, through a Cast) reads, told for the
        whole scaled norm: rms-norm refused that site for the same reason, and the report says it once."""
        graph = match.graph
        labels = {**match.nodes, "normalized": match.nodes["out"]}
        readers = graph.consumers(graph.by_name[match.nodes["out"]].outputs[0])
        if len(readers) == 1 and readers[0][0].op_type == "Cast":
            labels["normalized_down"] = readers[0][0].name
            readers = graph.consumers(readers[0][0].outputs[0])
        if len(readers) != 1 or readers[0][0].op_type != "Mul":
            return refused
        labels["out"] = readers[0][0].name
        return replace(refused, nodes=labels)


# --------------------------------------------------------------------------- fuse-skip-norm
class FuseSkipNorm(Fusion):
    """A residual Add (and a bias Add before it) with the norm that reads it → SkipLayerNormalization or
    SkipSimplifiedLayerNormalization."""

    name = "fuse-skip-norm"
    kind = "skip-norm"
    description = ("fuse a residual Add (with the projection's bias) and the LayerNorm or RMSNorm after it into "
                   "onnxruntime's SkipLayerNormalization or SkipSimplifiedLayerNormalization (off by default)")
    pattern_names = ("skip-norm", "skip-layer-norm", "skip-rms-norm")
    anchor_ops = ("LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization")
    family = "skip norm"
    fused_ops = ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization")

    def is_site(self, graph: Graph, node: Node) -> bool:
        """A norm of a sum (a residual Add, through a Cast): not the first layer's norm of the embeddings, a
        per-head norm of Q or K, or a final norm of a layer's output read by nothing else."""
        return bool(node.inputs) and written_by(graph, node.inputs[0], lambda n: n.op_type == "Add",
                                                through=("Cast",), steps=1)

    @staticmethod
    def layer_norm(match: Match) -> bool:
        """Whether the match is a layer norm (mean and variance) rather than an RMS norm."""
        if match.pattern == "skip-norm":
            return match.graph.by_name[match.nodes["out"]].op_type == "LayerNormalization"
        return match.pattern == "skip-layer-norm"

    def fuse(self, site: Site) -> Fused | Refusal:
        parts = Parts(site)
        layer_norm = self.layer_norm(site.match)
        norm = self._norm(site, parts, layer_norm)
        if isinstance(norm, Refusal):
            return norm
        scales, epsilon = norm
        operands = self._operands(site, parts, scales)
        if isinstance(operands, Refusal):
            return operands
        first, second, bias = operands
        inputs = [first, second, *scales]
        if bias:
            inputs += [""] * (4 - len(inputs)) if layer_norm else []
            inputs.append(bias)
        out, total = site.matched("out"), site.matched("sum").outputs[0]
        outputs = [out.outputs[0]]
        if self._read_later(site, total):
            outputs += ["", "", total]
        order = self._order(site, total)
        if order is not None:
            return order
        op = "SkipLayerNormalization" if layer_norm else "SkipSimplifiedLayerNormalization"
        kind = "skip-layer-norm" if layer_norm else "skip-rms-norm"
        return Fused(TargetOp(op, MS_DOMAIN), inputs, {"epsilon": epsilon}, outputs, parts.before, kind=kind)

    def _norm(self, site: Site, parts: Parts, layer_norm: bool) -> tuple[list[str], float] | Refusal:
        """γ (and β) as the skip op takes them, and ε."""
        out, total = site.matched("out"), site.matched("sum").outputs[0]
        length = last_dim(site, total)
        if site.match.pattern == "skip-norm":
            return self._norm_op(site, parts, out, total, length, layer_norm)
        if layer_norm:
            mean, var = site.matched("mean"), site.matched("var")
            for node, label in ((mean, "axes"), (var, "var_axes")):
                found = over_last_axis(site, node, label, total)
                if found is not None:
                    return found
            epsilon = epsilon_of(site, site.node("var_eps"), "eps")
            scaled = site.matched("scaled")
        else:
            found = over_last_axis(site, site.matched("mean_square"), "axes", total)
            if found is not None:
                return found
            epsilon = epsilon_of(site, site.node("with_eps"), "eps")
            scaled = out
        if isinstance(epsilon, Refusal):
            return epsilon
        scales = [parts.vector("gamma", None if layer_norm else "gamma_like", length, "γ", scaled)]
        if layer_norm:
            scales.append(parts.vector("beta", None, length, "β", out))
        return _named(scales, epsilon)

    def _norm_op(self, site: Site, parts: Parts, out: Node, total: str, length: int | None,
                 layer_norm: bool) -> tuple[list[str], float] | Refusal:
        extra = unused_extra_outputs(site, out)
        if extra is not None:
            return extra
        rank = rank_of(site.graph, total)
        axis = int(out.attrs.get("axis", -1))
        if out.op_type != "SkipSimplifiedLayerNormalization" and axis != -1 and (rank is None or axis != rank - 1):
            return site.refuse(f"{out.label} normalizes from axis {axis}, not over the last axis alone")
        if int(out.attrs.get("stash_type", 1)) != 1:
            return site.refuse(f"{out.label} computes its statistics in type {out.attrs['stash_type']}, not float")
        epsilon = float(out.attrs.get("epsilon", DEFAULT_EPSILON[out.op_type]))
        if out.op_type == "SkipSimplifiedLayerNormalization":
            epsilon /= 4  # it normalizes sum + sum (see the module docstring)
        scales = [parts.vector("gamma", "gamma_like", length, "γ", out)]
        if layer_norm and site.tensor("beta") is not None:
            scales.append(parts.vector("beta", "beta_like", length, "β", out))
        return _named(scales, epsilon)

    def _operands(self, site: Site, parts: Parts, scales: list[str]) -> tuple[str, str, str | None] | Refusal:
        """The skip op's input and skip (the one that may broadcast over the batch second), and bias."""
        add = site.matched("sum")
        total = add.outputs[0]
        first, second = site.value("projected"), site.value("residual")
        biased, bias = site.node("biased"), None
        if biased is not None:
            vector = parts.vector("bias", None, last_dim(site, total), "bias", biased)
            if isinstance(vector, Refusal):  # not a bias over the last axis: the Add stays, before the skip op
                parts.before.append(onnx.NodeProto())
                parts.before[-1].CopyFrom(biased.proto)
                first = biased.outputs[0]
            else:
                bias = vector
        # the Add's operands and the sum share a type; the scales are constants, whose type is known
        dtype = parts.dtype(total) or parts.dtype(first) or parts.dtype(second) or parts.dtype(scales[0])
        for tensor in (*scales, bias):
            if tensor and parts.dtype(tensor) != dtype:
                return site.refuse(f"{add.label} adds {dtype} values and '{tensor}' is {parts.dtype(tensor)}, "
                                   "and the skip op takes one type")
        if dtype not in SKIP_DTYPES:
            return site.refuse(f"{add.label} adds {dtype} values, and onnxruntime's skip ops take float32 or float16")
        shapes = [dims_of(site.graph, t) for t in (first, second)]  # also past earlier fusions' contrib ops
        if shapes[0] is None or shapes[1] is None:
            unknown = first if shapes[0] is None else second
            return site.refuse(f"the shape of '{unknown}', which {add.label} adds, is unknown")
        if _skip_fits(shapes[0], shapes[1]):
            return first, second, bias
        if _skip_fits(shapes[1], shapes[0]):
            return second, first, bias
        return site.refuse(f"{add.label} adds shapes {_dims(shapes[0])} and {_dims(shapes[1])}, and the skip op "
                           "takes input and skip of one shape, of rank 2 or 3")

    @staticmethod
    def _read_later(site: Site, total: str) -> bool:
        matched = set(site.match.nodes.values())
        readers = [node for node, _ in site.graph.consumers(total) if node.name not in matched]
        return bool(readers) or site.graph.is_graph_output(total) or total in site.graph.outer_reads()

    @staticmethod
    def _order(site: Site, total: str) -> Refusal | None:
        """The fused node stands where the norm stood; a reader of the sum between them would read it too early."""
        positions = site.graph.positions()
        matched = set(site.match.nodes.values())
        anchor = max(positions[name] for name in matched)
        early = [node for node, _ in site.graph.consumers(total)
                 if node.name not in matched and positions[node.name] < anchor]
        if early:
            return site.refuse(f"{early[0].label} reads the sum of {site.matched('sum').label} before "
                               f"{site.matched('out').label}, where the fused op would stand")
        return None


def _named(scales: list[str | Refusal], epsilon: float) -> tuple[list[str], float] | Refusal:
    """The scales' tensors and ε, or the first scale's refusal."""
    refused = [s for s in scales if isinstance(s, Refusal)]
    return refused[0] if refused else ([s for s in scales if not isinstance(s, Refusal)], epsilon)


def _dims(shape: tuple[Dim, ...]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _same_dim(a: Dim, b: Dim) -> bool:
    """Equal, or not known to differ: two symbols, or a symbol and a size other than 1 (shape
    inference loses such equalities through Reshapes). A 1 against anything else broadcasts."""
    if a == b:
        return True
    if isinstance(a, int) and isinstance(b, int):
        return False
    return a != 1 and b != 1


def _skip_fits(shape: tuple[Dim, ...], skip: tuple[Dim, ...]) -> bool:
    """Whether ``shape`` can be the skip op's input and ``skip`` its skip: one shape, of rank 2 or 3,
    save a skip batch of 1 against a batch the model does not fix (rxnmap's [1, S, D] embeddings
    against [B, S, D]), which onnxruntime broadcasts if B is not 1 at run time.

    onnxruntime also takes a skip of [1, S, D] or [S, D] against a larger fixed batch; such a
    residual (whisper's positions) is left alone all the same: the skip kernels' one-pass variance
    drifts from LayerNormalization's where the sum's mean dwarfs its spread, as embeddings' can.
    """
    if len(shape) not in SKIP_RANKS or len(skip) != len(shape):
        return False
    return all(_same_dim(a, b) or (axis == 0 and b == 1 and not isinstance(a, int))
               for axis, (a, b) in enumerate(zip(shape, skip)))


RULES: tuple[Rule, ...] = (FuseSkipNorm(), FuseRmsNorm())
