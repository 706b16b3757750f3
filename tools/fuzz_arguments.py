"""The fuzz campaign's bad-argument cases (tools/fuzz_campaign.py): seeds, rule lists, dims, inputs, sizes and
paths a user can get wrong, each on a copy of the demo model. NaN/Inf inputs must never pass a check."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

Make = Callable[[Path, Path], list[str]]
"""(case folder, the demo model) -> the arguments; writes what the case needs into the folder."""


def _demo(folder: Path, demo: Path) -> str:
    copy = folder / "demo.onnx"
    if not copy.exists():
        shutil.copyfile(demo, copy)
    return str(copy)


def _npz(folder: Path, name: str, array: np.ndarray) -> str:
    path = folder / name
    np.savez(path, image=array)
    return str(path)


def _fold(*extra: str) -> Make:
    return lambda f, d: ["fold", _demo(f, d), "-o", str(f / "out" / "folded.onnx"), *extra]


def _quantize(*extra: str) -> Make:
    return lambda f, d: ["quantize", _demo(f, d), "-o", str(f / "out" / "quantized.onnx"), *extra]


def _binarize(*extra: str) -> Make:
    return lambda f, d: ["binarize", _demo(f, d), "-o", str(f / "out" / "binarized.onnx"), *extra]


def _with_file(command: Callable[..., Make], option: str, write: Callable[[Path], str]) -> Make:
    return lambda f, d: command(option, write(f))(f, d)


def _nan(folder: Path) -> str:
    return _npz(folder, "nan.npz", np.full((1, 3, 32, 32), np.nan, np.float32))


def _inf(folder: Path) -> str:
    return _npz(folder, "inf.npz", np.full((1, 3, 32, 32), np.inf, np.float32))


def _some_nan(folder: Path) -> str:
    array = np.random.default_rng(0).normal(size=(1, 3, 32, 32)).astype(np.float32)
    array[0, 0, 0, 0] = np.nan
    return _npz(folder, "some-nan.npz", array)


def _wrong_shape(folder: Path) -> str:
    return _npz(folder, "wrong-shape.npz", np.zeros((2, 5), np.float32))


def _text(folder: Path) -> str:
    path = folder / "notes.npz"
    path.write_text("not an npz\n")
    return str(path)


def _folder(folder: Path) -> str:
    path = folder / "a-folder"
    path.mkdir(exist_ok=True)
    return str(path)


def _diff(option: str, write: Callable[[Path], str]) -> Make:
    return lambda f, d: ["diff", _demo(f, d), _demo(f, d), option, write(f)]


MAY_PASS = {"fold --seed 2^70", "quantize --target-sqnr inf", "compare --top -1", "quantize --calibration nan.npz",
            "render --select ghost"}
"""Cases a command may accept (exit 0) as well as refuse; every other non-NaN case must be refused."""


def argument_cases() -> list[tuple[str, str, bool, bool, Make]]:
    """(label starting with the command, what is wrong, whether NaN/Inf inputs are involved (then no check may
    pass), whether exit 0 is acceptable, the arguments)."""
    return [(label, what, nan, label in MAY_PASS, make) for label, what, nan, make in _cases()]


def _cases() -> list[tuple[str, str, bool, Make]]:
    cases: list[tuple[str, str, bool, Make]] = [
        ("diff --seed -1", "a negative seed", False, lambda f, d: ["diff", _demo(f, d), _demo(f, d), "--seed", "-1"]),
        ("fold --seed -1", "a negative seed", False, _fold("--check", "--seed", "-1")),
        ("quantize --seed -1", "a negative seed", False, _quantize("--seed", "-1")),
        ("binarize --seed -1", "a negative seed", False, _binarize("--seed", "-1")),
        ("fold --seed 2^70", "a seed too large for numpy", False, _fold("--check", "--seed", str(2**70))),
        ("fold --rules ,,,", "a rule list of empty names", False, _fold("--rules", ",,,")),
        ("fold --rules ''", "an empty rule list", False, _fold("--rules", "")),
        ("fold --rules ' '", "a blank rule list", False, _fold("--rules", " ")),
        ("fold --rules fold-bn,,", "a rule list with empty names", False, _fold("--rules", "fold-bn,,")),
        ("fold --rules nope", "an unknown rule", False, _fold("--rules", "nope")),
        ("fold --dim N=-1", "a negative dim", False, _fold("--dim", "N=-1")),
        ("fold --dim image[0]=0", "a zero dim", False, _fold("--dim", "image[0]=0")),
        ("fold --dim image[9]=4", "an axis the input lacks", False, _fold("--dim", "image[9]=4")),
        ("fold --dim =3", "a nameless dim", False, _fold("--dim", "=3")),
        ("fold --dim image[0]=2^40", "a dim no memory holds", False, _fold("--dim", f"image[0]={2**40}")),
        ("fold -o MODEL", "the output is the input, without --in-place", False,
         lambda f, d: ["fold", _demo(f, d), "-o", _demo(f, d)]),
        ("fold -o FOLDER", "the output is a folder", False, lambda f, d: ["fold", _demo(f, d), "-o", _folder(f)]),
        ("fold -o missing/x.onnx", "the output's folder does not exist", False,
         lambda f, d: ["fold", _demo(f, d), "-o", str(f / "out" / "missing" / "x.onnx")]),
        ("fold --report FOLDER", "the report is a folder", False, lambda f, d: _fold("--report", _folder(f))(f, d)),
        ("fold --inputs nan.npz", "all-NaN inputs", True, _with_file(_fold, "--inputs", _nan)),
        ("fold --inputs some-nan.npz", "one NaN input value", True, _with_file(_fold, "--inputs", _some_nan)),
        ("diff --inputs nan.npz", "all-NaN inputs", True, _diff("--inputs", _nan)),
        ("diff --inputs inf.npz", "all-Inf inputs", True, _diff("--inputs", _inf)),
        ("diff --inputs some-nan.npz", "one NaN input value", True, _diff("--inputs", _some_nan)),
        ("diff --inputs wrong-shape.npz", "inputs of the wrong shape", False, _diff("--inputs", _wrong_shape)),
        ("diff --inputs notes.npz", "inputs that are not an npz", False, _diff("--inputs", _text)),
        ("diff --inputs FOLDER", "inputs that are a folder", False, _diff("--inputs", _folder)),
        ("diff --inputs /dev/zero", "inputs from a device", False, _diff("--inputs", lambda f: "/dev/zero")),
        ("compare --inputs nan.npz", "all-NaN inputs, compare --check", True,
         lambda f, d: ["compare", _demo(f, d), _demo(f, d), "--check", "--inputs", _nan(f)]),
        ("compare --top -1", "a negative count", False,
         lambda f, d: ["compare", _demo(f, d), _demo(f, d), "--top", "-1"]),
        ("quantize --samples 0", "no samples", False, _quantize("--samples", "0")),
        ("quantize --samples -5", "a negative sample count", False, _quantize("--samples", "-5")),
        ("quantize --target-sqnr nan", "a NaN target", False, _quantize("--target-sqnr", "nan")),
        ("quantize --target-sqnr inf", "an infinite target", False, _quantize("--target-sqnr", "inf")),
        ("quantize --exclude ,,,", "an exclusion list of empty names", False, _quantize("--exclude", ",,,")),
        ("quantize --calibration nan.npz", "all-NaN calibration samples", False,
         _with_file(_quantize, "--calibration", _nan)),
        ("quantize --calibration /dev/zero", "calibration from a device", False,
         _quantize("--calibration", "/dev/zero")),
        ("quantize --calibration FOLDER", "an empty image folder", False,
         lambda f, d: _quantize("--calibration", _folder(f))(f, d)),
        ("quantize --block-size 0", "a zero block size", False, _quantize("--weight-only", "--block-size", "0")),
        ("binarize --bits 0", "zero bits", False, _binarize("--bits", "0")),
        ("binarize --bits 99", "too many bits", False, _binarize("--bits", "99")),
        ("binarize --layers ghost", "an unknown layer", False, _binarize("--layers", "ghost")),
        ("binarize --layer-bits /stem/conv=0", "zero bits for one layer", False,
         _binarize("--layer-bits", "/stem/conv=0")),
        ("binarize --mean-bits nan", "a NaN mean", False, _binarize("--bits", "4", "--mean-bits", "nan")),
        ("render -o x.txt", "an output format render does not write", False,
         lambda f, d: ["render", _demo(f, d), "-o", str(f / "out" / "x.txt")]),
        ("render --select ghost", "an unknown node", False,
         lambda f, d: ["render", _demo(f, d), "-o", str(f / "out" / "x.svg"), "--select", "ghost"]),
        ("render --collapse (((", "a malformed pattern", False,
         lambda f, d: ["render", _demo(f, d), "-o", str(f / "out" / "x.svg"), "--collapse", "((("]),
        ("render --overlay missing.csv", "a missing overlay", False,
         lambda f, d: ["render", _demo(f, d), "-o", str(f / "out" / "x.svg"), "--overlay", str(f / "missing.csv")]),
        ("match -p (((", "a malformed pattern", False, lambda f, d: ["match", _demo(f, d), "-p", "((("]),
        ("match -p /dev/zero", "a pattern from a device", False,
         lambda f, d: ["match", _demo(f, d), "-p", "/dev/zero"]),
        ("match -p FOLDER", "a pattern that is a folder", False, lambda f, d: ["match", _demo(f, d), "-p", _folder(f)]),
        ("explain --at ghost", "an unknown node", False,
         lambda f, d: ["explain", _demo(f, d), "-p", "conv-bn", "--at", "ghost"]),
        ("explain --at ''", "an empty node name", False,
         lambda f, d: ["explain", _demo(f, d), "-p", "conv-bn", "--at", ""]),
        ("info ''", "an empty path", False, lambda f, d: ["info", ""]),
        ("info /dev/null", "an empty device", False, lambda f, d: ["info", "/dev/null"]),
    ]
    return cases
