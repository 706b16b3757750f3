"""fuse-activations (off by default): activations exported in pieces, replaced by the fused ONNX op.

silu → Swish, hard-swish → HardSwish, gelu → Gelu (``approximate="tanh"`` for the tanh form),
layer-norm → LayerNormalization, leaky-relu → LeakyRelu; each only where the model's opset for
the default domain has that op (the refusal says which opset added it). A layer norm with the
Casts of mixed precision becomes one LayerNormalization in gamma's type, x cast to it if need be;
one whose exporter dropped the epsilon gets epsilon 0.
"""

from __future__ import annotations

import numpy as np
import onnx

from graphlens.matching.matcher import Match
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Rule, Site, fresh_name

FUSED_OP = {"silu": "Swish", "hard-swish": "HardSwish", "gelu": "Gelu", "layer-norm": "LayerNormalization", "leaky-relu": "LeakyRelu"}


def op_available(op: str, opset: int) -> tuple[bool, int | None]:
    """Whether the default domain at ``opset`` has ``op``, and the opset that introduced it."""
    try:
        first = min(s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == "")
    except ValueError:
        return False, None
    return opset >= first, first


class FuseActivations(Rule):
    name = "fuse-activations"
    description = "replace silu, hard-swish, gelu, layer-norm and leaky-relu written in pieces by the fused op (off by default)"
    pattern_names = tuple(FUSED_OP)
    default = False

    def _kind(self, match: Match) -> str:
        return match.pattern

    def check(self, match: Match) -> str | None:
        site = Site(match)
        op = FUSED_OP[self._kind(match)]
        model = site.graph.model
        opset = model.opset("") if model is not None else None
        ok, first = op_available(op, opset or 0)
        if not ok:
            return f"the model's opset {opset} has no {op} (it arrived in opset {first})"
        if self._kind(match) == "layer-norm":
            return self._layer_norm(site)[1]
        return None

    def _layer_norm(self, site: Site) -> tuple[dict | None, str | None]:
        mean, var = site.node("mean"), site.node("var")
        axes = []
        for node, label in ((mean, "axes"), (var, "var_axes")):
            if int(node.attrs.get("keepdims", 1)) != 1:
                return None, f"{node.label} drops the reduced axes (keepdims=0)"
            found = node.attrs.get("axes")
            if found is None and site.tensor(label) is not None:
                found = site.const(label)
            if found is None:
                return None, f"{node.label} reduces over all axes"
            axes.append(sorted(int(a) for a in np.asarray(found).reshape(-1)))
        if axes[0] != axes[1]:
            return None, f"{mean.label} and {var.label} reduce over different axes ({axes[0]} and {axes[1]})"
        rank = site.rank_of(site.tensor("x"))
        normalized = axes[0]
        if rank is not None:
            normalized = sorted(a - rank if a >= 0 else a for a in normalized)
        if normalized != list(range(-len(normalized), 0)):
            return None, f"{mean.label} reduces over axes {axes[0]}, not the trailing ones LayerNormalization uses"
        eps = site.const("eps")  # absent where the exporter dropped a tiny epsilon: the Sqrt reads the variance
        epsilon = 0.0 if eps is None else float(np.asarray(eps, np.float64).reshape(-1)[0])
        return {"axis": normalized[0], "epsilon": epsilon}, None

    def _cast_input(self, site: Site, taken_by: str) -> tuple[str, onnx.NodeProto | None]:
        """x, or x cast to gamma's type where the match casts between them (mixed precision).

        LayerNormalization wants X, Scale and B of one type; the matched nodes produced gamma's.
        """
        x = site.tensor("x")
        want = site.graph.tensor_type(site.tensor("gamma")).dtype
        have = site.graph.tensor_type(x).dtype
        if not (site.node("centered_cast") or site.node("normalized_cast")) or want is None or want == have:
            return x, None
        cast_out = fresh_name(site.graph, f"{x}_as_{want}", set())
        to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(want)) if want != "bfloat16" else onnx.TensorProto.BFLOAT16
        return cast_out, onnx.helper.make_node("Cast", [x], [cast_out], name=f"{taken_by}/cast_x", to=to)

    def plan(self, match: Match) -> GraphEdit:
        site = Site(match)
        kind = self._kind(match)
        op = FUSED_OP[kind]
        out = site.node("out")
        x = site.tensor("x")
        inputs, attrs = [x], {}
        nodes: list[onnx.NodeProto] = []
        if kind == "gelu":
            attrs["approximate"] = "tanh" if "tanh" in match.nodes else "none"
        elif kind == "leaky-relu":
            attrs["alpha"] = float(np.asarray(site.const("alpha"), np.float64).reshape(-1)[0])
        elif kind == "layer-norm":
            found, reason = self._layer_norm(site)
            assert found is not None, reason
            attrs.update(found)
            x_in, cast = self._cast_input(site, out.name)
            nodes += [cast] if cast is not None else []
            inputs = [x_in, site.tensor("gamma"), site.tensor("beta")]
        nodes.append(onnx.helper.make_node(op, inputs, [out.outputs[0]], name=out.name, **attrs))
        return GraphEdit(site.graph.path, self.name, f"fuse the {kind} ending at {out.label} into {op}",
                         list(match.nodes.values()), nodes, boundary=[(out.outputs[0], out.outputs[0])],
                         site=dict(match.nodes))
