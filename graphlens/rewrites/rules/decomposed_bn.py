"""fuse-decomposed-bn and bn-to-affine: batch norm spelled out in pieces, and back.

fuse-decomposed-bn replaces ``(x − μ) / √(σ² + ε) · γ + β`` (the ``decomposed-bn`` pattern, Div or
Reciprocal form) by one ``BatchNormalization(x, γ, β, μ, σ², epsilon=ε)``, which ``fold-bn`` may
then fold. Each parameter must hold one value per channel of x (axis 1), or one value in all.
Where the exporter folded √(σ² + ε) (or its inverse) into one constant s, the BN gets σ² = s²,
ε = 0 and γ·sign(s), which is the same function.

bn-to-affine (off by default) turns a BatchNormalization with nothing to fold into into
``Mul(x, s) + Add(t)`` with s = γ/√(σ²+ε), t = β − μ·s (see :mod:`bn_math`), shaped [C, 1, …] so
they broadcast along axis 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from graphlens.matching.match import Match
from graphlens.rewrites import bn_math
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site, fresh_name, initializer, shape_text
from graphlens.rewrites.rules.naming import place_in_scope

_FLOAT_DTYPES: dict[str, type[np.generic]] = {"float32": np.float32, "float16": np.float16, "float64": np.float64}


def _dtype_of(site: Site, tensor: str, fallback: np.ndarray) -> type[np.generic]:
    found: type[np.generic] = _FLOAT_DTYPES.get(site.graph.tensor_type(tensor).dtype or "", fallback.dtype.type)
    return found


def _folded_std(site: Site) -> np.ndarray | None:
    """sqrt(var + eps) when the match divides by it (or multiplies by its inverse) as one constant, in float64."""
    std, inv_std = site.const("std_value"), site.const("inv_std_value")
    if std is not None:
        return np.asarray(std, np.float64)
    if inv_std is not None:
        with np.errstate(divide="ignore"):
            return 1.0 / np.asarray(inv_std, np.float64)
    return None


@dataclass(frozen=True)
class _DecomposedBatchNorm:
    """The parameters of a decomposed batch norm, as a BatchNormalization takes them."""

    site: Site
    vectors: dict[str, np.ndarray]
    """mean, var, gamma, beta: one float64 value per channel."""
    epsilon: float
    dtype: type[np.generic]


class FuseDecomposedBatchNorm(Rule):
    name = "fuse-decomposed-bn"
    description = "replace batch norm written as Sub/Add/Sqrt/Div/Mul/Add by one BatchNormalization"
    pattern_names = ("decomposed-bn",)

    def _prepare(self, match: Match) -> _DecomposedBatchNorm | Refusal:
        site = Site(match, self)
        x = site.value("x")
        found = {k: site.const(k) for k in ("mean", "var", "gamma", "beta", "eps")}
        folded = _folded_std(site)
        if folded is not None:  # sqrt(var + eps) already one constant: var = std², eps = 0, its sign into gamma
            if not np.all(np.isfinite(folded)) or np.any(folded == 0):
                return site.refuse("the folded standard deviation has a zero or non-finite value")
            found["var"], found["eps"] = np.square(folded), np.zeros((), np.float64)
            gamma = found["gamma"]
            if gamma is not None:
                found["gamma"] = gamma * np.sign(folded)
        params = {k: v for k, v in found.items() if v is not None}
        if len(params) < len(found):
            return site.missing(None, tuple(found)) or site.refuse("a parameter could not be evaluated")
        if params["eps"].size != 1:
            return site.refuse(f"epsilon has shape {shape_text(params['eps'].shape)}, not a single value")
        shape = site.graph.tensor_type(x).shape
        rank = None if shape is None else len(shape)
        widest = max((v for k, v in params.items() if k != "eps"), key=lambda v: v.size)
        if rank is None:
            rank = widest.ndim + 1 if widest.ndim >= 2 else 2  # [C, 1, 1] implies [N, C, H, W]; [C] implies [N, C]
        channels = int(widest.size) if widest.size > 1 else (shape[1] if shape and isinstance(shape[1], int) else None)
        if channels is None or rank < 2:
            return site.refuse(f"cannot tell how many channels '{x}' has")
        vectors: dict[str, np.ndarray] = {}
        for key in ("mean", "var", "gamma", "beta"):
            vec = bn_math.per_channel_vector(params[key], channels, rank)
            if vec is None:
                return site.refuse(
                    f"{key} of shape {shape_text(params[key].shape)} does not hold one value per channel "
                    f"(axis 1) of '{x}'"
                )
            vectors[key] = vec
        eps = float(np.asarray(params["eps"], np.float64).reshape(-1)[0])
        if np.any(vectors["var"] + eps <= 0):
            return site.refuse("var + eps is not positive for every channel")
        return _DecomposedBatchNorm(site, vectors, eps, _dtype_of(site, x, params["gamma"]))

    def plan(self, match: Match) -> Plan | Refusal:
        bn = self._prepare(match)
        if isinstance(bn, Refusal):
            return bn
        site = bn.site
        out = site.matched("out")
        taken: set[str] = set()
        names = {k: fresh_name(site.graph, f"{out.name}.{k}", taken) for k in ("gamma", "beta", "mean", "var")}
        inits = {names[k]: initializer(names[k], bn.vectors[k], bn.dtype) for k in names}
        proto = onnx.helper.make_node(
            "BatchNormalization", [site.value("x"), names["gamma"], names["beta"], names["mean"], names["var"]],
            [out.outputs[0]], name=out.name, epsilon=bn.epsilon,
        )
        place_in_scope(site.graph, [proto], list(match.nodes.values()), proto)
        return GraphEdit(site.graph.path, self.name, f"fuse the batch norm ending at {out.label}",
                         list(match.nodes.values()), [proto], inits,
                         boundary=[(out.outputs[0], out.outputs[0])], site=dict(match.nodes))


class BatchNormToAffine(Rule):
    name = "bn-to-affine"
    description = "turn a BatchNormalization with nothing to fold into into Mul + Add (off by default)"
    pattern_texts = (
        "bn = BatchNormalization(x, scale: const, B: const, mean: const, var: const) "
        "where training_mode in [0, absent], is_test != 0\n",
    )
    default = False

    def plan(self, match: Match) -> Plan | Refusal:
        site = Site(match, self)
        bn, x = site.matched("bn"), site.value("x")
        rank = site.rank_of(x)
        if rank is None or rank < 2:
            return site.refuse(f"the rank of the input of {bn.label} is unknown, so the channel axis cannot be placed")
        if any(o for o in bn.outputs[1:]):
            return site.refuse(f"{bn.label} also outputs its running statistics")
        gamma, beta, mean, var = (site.const(k) for k in ("scale", "B", "mean", "var"))
        if gamma is None or beta is None or mean is None or var is None:  # np.asarray(None): NaN weights
            why = site.missing(bn, ("scale", "B", "mean", "var"))
            return why or site.refuse(f"a parameter of {bn.label} could not be evaluated")
        epsilon = float(bn.attrs.get("epsilon", 1e-5))
        unfoldable = bn_math.unfoldable_statistics(gamma, beta, mean, var, epsilon)
        if unfoldable is not None:
            return site.refuse(f"{bn.label} cannot be decomposed: {unfoldable}")
        params = bn_math.bn_affine(gamma, beta, mean, var, epsilon)
        shape = (params.channels,) + (1,) * (rank - 2)
        dtype = _dtype_of(site, x, gamma)
        taken: set[str] = set()
        s_name = fresh_name(site.graph, f"{bn.name}.scale", taken)
        t_name = fresh_name(site.graph, f"{bn.name}.shift", taken)
        scaled = fresh_name(site.graph, f"{bn.outputs[0]}_scaled", taken)
        mul_name = bn.name + "/mul"
        while mul_name in site.graph.by_name:
            mul_name += "_"
        nodes = [
            onnx.helper.make_node("Mul", [x, s_name], [scaled], name=mul_name),
            onnx.helper.make_node("Add", [scaled, t_name], [bn.outputs[0]], name=bn.name),
        ]
        place_in_scope(site.graph, nodes, [bn.name], nodes[1])
        inits = {
            s_name: initializer(s_name, params.scale.reshape(shape), dtype),
            t_name: initializer(t_name, params.shift.reshape(shape), dtype),
        }
        return GraphEdit(site.graph.path, self.name, f"turn {bn.label} into Mul + Add", [bn.name], nodes, inits,
                         boundary=[(bn.outputs[0], bn.outputs[0])], site=dict(match.nodes))
