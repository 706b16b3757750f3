"""The rewrite rules, by name, in the order the fold driver applies them."""

from graphlens.rewrites.rule import FoldDetails, Plan, Refusal, Rule
from graphlens.rewrites.rules.activations import FuseActivations
from graphlens.rewrites.rules.decomposed_bn import BatchNormToAffine, FuseDecomposedBatchNorm
from graphlens.rewrites.rules.fold_affine import FoldAffine
from graphlens.rewrites.rules.fold_bn import FoldBatchNorm
from graphlens.rewrites.rules.freeze_inputs import FreezeInputs

RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        FreezeInputs(), FuseDecomposedBatchNorm(), FoldBatchNorm(), FoldAffine(), FuseActivations(), BatchNormToAffine(),
    )
}
DEFAULT_RULES = [name for name, rule in RULES.items() if rule.default]

__all__ = ["RULES", "DEFAULT_RULES", "FoldDetails", "Plan", "Refusal", "Rule"]
