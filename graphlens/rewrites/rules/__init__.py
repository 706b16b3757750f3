"""The rewrite rules, by name, in the order the fold driver applies them, and the named sets of rules."""

from graphlens.rewrites.rule import FoldDetails, Plan, Refusal, Rule
from graphlens.rewrites.rules.activations import FuseActivations
from graphlens.rewrites.rules.decomposed_bn import BatchNormToAffine, FuseDecomposedBatchNorm
from graphlens.rewrites.rules.equalize import Equalize
from graphlens.rewrites.rules.fold_affine import FoldAffine
from graphlens.rewrites.rules.fold_bn import FoldBatchNorm
from graphlens.rewrites.rules.fold_constants import FoldConstants
from graphlens.rewrites.rules.freeze_inputs import FreezeInputs
from graphlens.rewrites.rules.tidy import Tidy
from graphlens.rewrites.rules.transformers import TRANSFORMER_RULES

RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        FreezeInputs(), FuseDecomposedBatchNorm(), FoldBatchNorm(), FoldAffine(), FuseActivations(),
        BatchNormToAffine(), FoldConstants(), Equalize(), *TRANSFORMER_RULES, Tidy(),
    )
}
DEFAULT_RULES = [name for name, rule in RULES.items() if rule.default]

RULE_SETS: dict[str, tuple[str, ...]] = {
    "transformers": ("fold-constants", *(rule.name for rule in TRANSFORMER_RULES), "tidy"),
}
"""Names that stand for several rules in ``--rules`` (``--rules transformers``), in the order they run."""

__all__ = ["RULES", "DEFAULT_RULES", "RULE_SETS", "FoldDetails", "Plan", "Refusal", "Rule"]
