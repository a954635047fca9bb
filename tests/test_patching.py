"""The shared base-plus-patch mechanism of the broken variants and the calibration cases (``patching``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from patching import PatchDoesNotApply, apply_patch, patched_files

BASE = "def loss(margin):\n    scaled = 0.1 * margin\n    return softplus(-scaled)\n\n\ndef weight(margin):\n    return 1.0\n"
PATCH = """Broken: the sign of the margin is flipped.

--- a/posttrain/dpo.py
+++ b/posttrain/dpo.py
@@ -2,3 +2,3 @@
     scaled = 0.1 * margin
-    return softplus(-scaled)
+    return softplus(scaled)
{blank}
@@ -6,2 +6,2 @@
 def weight(margin):
-    return 1.0
+    return 2.0
""".format(blank=" ")  # a context line: the blank line, as diff writes it


def _base(into: Path, text: str = BASE) -> Path:
    (into / "posttrain").mkdir(parents=True)
    (into / "posttrain" / "dpo.py").write_text(text)
    return into / "posttrain" / "dpo.py"


def _patch(tmp_path: Path) -> Path:
    diff = tmp_path / "broken_dpo_sign.diff"
    diff.write_text(PATCH)
    return diff


def test_the_patch_names_its_files_and_changes_them(tmp_path: Path) -> None:
    diff = _patch(tmp_path)
    module = _base(tmp_path / "variant")
    assert patched_files(diff) == ["posttrain/dpo.py"]
    apply_patch(diff, tmp_path / "variant")
    assert module.read_text() == BASE.replace("softplus(-scaled)", "softplus(scaled)").replace("1.0", "2.0")


def test_a_patch_whose_base_changed_fails_naming_itself_and_the_hunk(tmp_path: Path) -> None:
    changed = BASE.replace("return 1.0", "return 1.5")
    module = _base(tmp_path / "variant", changed)
    with pytest.raises(PatchDoesNotApply) as failure:
        apply_patch(_patch(tmp_path), tmp_path / "variant")
    message = str(failure.value)
    assert message.startswith(f"{tmp_path / 'broken_dpo_sign.diff'}: the patch no longer applies")
    assert message.endswith("failed hunk of posttrain/dpo.py:\n@@ -6,2 +6,2 @@\n def weight(margin):\n"
                            "-    return 1.0\n+    return 2.0\n")
    assert module.read_text() == changed, "the hunk that still fits was applied: a half-patched variant"

