"""What a run computes in on a CUDA device, decided from its compute capability (bnexp.train.precision),
checked here without one: the capability torch reports is patched. bf16 counts only where it is native
(>= 8.0; torch's ``is_bf16_supported`` also says True for the emulated bfloat16 of older GPUs), TF32 only
where there are TF32 tensor cores (>= 8.0), and ``fp32`` turns TF32 off (cuDNN's default is on)."""

from __future__ import annotations

import pytest
import torch

from bnexp.train import precision

CUDA = torch.device("cuda")


@pytest.fixture
def capability(monkeypatch):
    """Set the compute capability torch reports; TF32 switches restored afterwards."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation counts there

    def set_to(major: int, minor: int = 0) -> None:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, minor))

    yield set_to
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("major, native", [(7, False), (8, True), (9, True)])
def test_bf16_and_tf32_count_only_where_native(capability, major, native):
    capability(major, 5 if major == 7 else 0)
    assert precision.bf16_supported(CUDA) is native
    assert precision.effective_precision("bf16", CUDA) == ("bf16" if native else "fp32")
    assert precision.effective_precision("tf32", CUDA) == ("tf32" if native else "fp32")
    assert precision.effective_precision("fp32", CUDA) == "fp32"


def test_the_tf32_switches_follow_the_precision(capability):
    capability(8)
    assert precision.apply_precision("tf32", CUDA) == (None, "tf32")
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    for name, want in (("fp32", (None, "fp32")), ("bf16", (torch.bfloat16, "bf16"))):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        assert precision.apply_precision(name, CUDA) == want
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32, name
    capability(7)
    with pytest.warns(UserWarning, match="no native TF32"):
        assert precision.apply_precision("tf32", CUDA) == (None, "fp32")
    assert not torch.backends.cudnn.allow_tf32


def test_a_cpu_computes_in_fp32_unless_it_has_native_bf16(monkeypatch):
    cpu = torch.device("cpu")
    assert precision.effective_precision("tf32", cpu) == "fp32"
    for native in (True, False):
        monkeypatch.setattr(precision, "bf16_supported", lambda device, native=native: native)
        assert precision.effective_precision("bf16", cpu) == ("bf16" if native else "fp32")
