"""Every data file is checked for the structure it must have, and a checksum error names the file that
failed (docs/reliability.md, "Data"): a data root's own SHA256SUMS list (the format ``sha256sum -c``
reads, as ../shared/data carries) checks each file of a non-canonical copy; the official md5 check
names every file that differs, not the first one; ``batches.meta`` must be the pickle of the 10 class
names torchvision reads.
"""

from __future__ import annotations

import hashlib
import pickle
import random
from pathlib import Path

import pytest

from bnexp.errors import DataError
from bnexp.nets.datasets import CIFAR_FILES, CIFAR_FOLDER, check_cifar10_files, check_mnist_files


def _copy(data_root: Path, tmp_path: Path, dataset_dir: str, names: list[str], manifest: bool = True) -> Path:
    """A data root in tmp_path holding real copies of ``names`` (links to the rest would share the
    original's bytes) and, with ``manifest``, the shared root's SHA256SUMS."""
    root = tmp_path / "data"
    (root / dataset_dir).mkdir(parents=True)
    for n in names:
        (root / dataset_dir / n).write_bytes((data_root / dataset_dir / n).read_bytes())
    if manifest:
        (root / "SHA256SUMS").write_text((data_root / "SHA256SUMS").read_text())
    return root


def _flip_byte(path: Path, at: int) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= 0x01
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("verify", [False, True])
def test_a_flipped_byte_in_data_batch_2_is_named(data_root, tmp_path, verify):
    root = _copy(data_root, tmp_path, CIFAR_FOLDER, CIFAR_FILES)
    check_cifar10_files(root, verify_checksums=False)  # the intact copy matches its list
    _flip_byte(root / CIFAR_FOLDER / "data_batch_2", 5000)
    with pytest.raises(DataError) as e:
        check_cifar10_files(root, verify_checksums=verify)
    msg = str(e.value)
    assert f"{root / CIFAR_FOLDER / 'data_batch_2'} of the data root" in msg and "SHA256SUMS" in msg
    assert "data_batch_1" not in msg and "data_batch_3" not in msg


@pytest.mark.slow  # md5 of 180 MB
def test_the_official_md5_check_names_every_file_that_differs(data_root, tmp_path):
    """The shared copy is re-encoded: all six batch files differ from the official md5s, batches.meta
    is byte-identical to the official one (the shared README), so it is not named."""
    root = _copy(data_root, tmp_path, CIFAR_FOLDER, CIFAR_FILES, manifest=False)
    with pytest.raises(DataError) as e:
        check_cifar10_files(root, verify_checksums=True)
    msg = str(e.value)
    assert "data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5, test_batch in" in msg
    assert "batches.meta" not in msg and "data.verify_checksums=false" in msg


def test_batches_meta_of_random_bytes_is_refused(data_root, tmp_path):
    root = _copy(data_root, tmp_path, CIFAR_FOLDER, CIFAR_FILES, manifest=False)
    meta = root / CIFAR_FOLDER / "batches.meta"
    meta.write_bytes(random.Random(0).randbytes(158))  # fixed bytes: the same refusal every run
    with pytest.raises(DataError, match=f"CIFAR-10 file {meta} is not a readable batches.meta"):
        check_cifar10_files(root, verify_checksums=False)


@pytest.mark.parametrize("content,why", [
    ({"label_names": ["cat", "dog"]}, "10 class names"),
    (["airplane"] * 10, "found list"),
    ({"label_names": [str(i) for i in range(10)], "num_vis": 1024}, "num_vis=1024"),
])
def test_batches_meta_of_another_structure_is_refused(data_root, tmp_path, content, why):
    root = _copy(data_root, tmp_path, CIFAR_FOLDER, CIFAR_FILES, manifest=False)
    meta = root / CIFAR_FOLDER / "batches.meta"
    meta.write_bytes(pickle.dumps(content))
    with pytest.raises(DataError, match=why) as e:
        check_cifar10_files(root, verify_checksums=False)
    assert str(meta) in str(e.value)


def test_mnist_files_are_checked_against_the_list(data_root, tmp_path):
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    root = _copy(data_root, tmp_path, "MNIST/raw", names)
    check_mnist_files(root)
    path = root / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    _flip_byte(path, 1000)  # a pixel: the header, sizes and labels are still right
    with pytest.raises(DataError, match=f"file {path} of the data root"):
        check_mnist_files(root)


def test_the_list_is_sha256sum_format(data_root):
    """An independent reading of one line of the shared list: the digest is hashlib's sha256."""
    line = next(l for l in (data_root / "SHA256SUMS").read_text().splitlines() if l.endswith("batches.meta"))
    digest, name = line.split(maxsplit=1)
    assert hashlib.sha256((data_root / name).read_bytes()).hexdigest() == digest


def test_a_process_reads_the_data_files_once_until_one_changes(data_root, tmp_path, monkeypatch):
    """load_data keeps the last dataset: the same settings give the same tensors without reading the files
    again; another scaling, or a data file rewritten (new modification time), reads them again."""
    import os
    import shutil

    import torch

    from bnexp.config.schema import compose_config
    from bnexp.nets import datasets as data_module

    (tmp_path / "MNIST" / "raw").mkdir(parents=True)
    for name in data_module.MNIST_FILES:
        shutil.copy(data_root / "MNIST" / "raw" / name, tmp_path / "MNIST" / "raw" / name)
    reads = []
    real = data_module.load_mnist
    monkeypatch.setattr(data_module, "load_mnist", lambda *a: reads.append(a) or real(*a))
    monkeypatch.setattr(data_module, "_LOADED", {})
    cfg = compose_config([f"data.root={tmp_path}"]).data
    cpu = torch.device("cpu")
    first = data_module.load_data(cfg, cpu)
    assert data_module.load_data(cfg, cpu) is first and len(reads) == 1
    other = data_module.load_data(compose_config([f"data.root={tmp_path}", "data.scaling=standardize"]).data, cpu)
    assert len(reads) == 2 and not torch.equal(other.train_x, first.train_x)
    again = data_module.load_data(cfg, cpu)
    assert len(reads) == 3 and torch.equal(again.train_x, first.train_x)
    path = tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert data_module.load_data(cfg, cpu) is not again and len(reads) == 4
