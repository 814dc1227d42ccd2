"""Datasets held as tensors on the training device, and the seeded mini-batch sampler.

The whole dataset is loaded once through torchvision, converted to float tensors
of shape (N, C, H, W) on the training device, and mini-batches are drawn by index
from a seeded per-epoch permutation (no DataLoader workers: the models here are
small and the loader would dominate the step time).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from bnexp.errors import DataError

log = logging.getLogger(__name__)

# MNIST IDX files: (file name, magic number, number of items, bytes per item).
MNIST_FILES = {
    "train-images-idx3-ubyte": (2051, 60000, 28 * 28),
    "train-labels-idx1-ubyte": (2049, 60000, 1),
    "t10k-images-idx3-ubyte": (2051, 10000, 28 * 28),
    "t10k-labels-idx1-ubyte": (2049, 10000, 1),
}


@dataclass
class TensorData:
    """A labelled image dataset held as tensors.

    Attributes:
        train_x: (N_train, C, H, W) float32, scaled.
        train_y: (N_train,) int64 class labels.
        test_x: (N_test, C, H, W) float32, scaled like train_x: the images every evaluation reads (the
            test set, or the validation split: ``eval_split``).
        test_y: (N_test,) int64.
        num_classes: number of classes.
        name: dataset name.
        eval_split: ``"test"`` (the dataset's test set) or ``"validation"`` (images held out of the training
            set by :func:`hold_out`; the test set is then not loaded into the run at all).
    """

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    name: str
    eval_split: str = "test"

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image."""
        return tuple(self.train_x.shape[1:])  # type: ignore[return-value]


def default_data_root() -> Path:
    """The data root used when ``data.root`` is null: $BNEXP_DATA_ROOT, else ~/.cache/bnexp/data."""
    env = os.environ.get("BNEXP_DATA_ROOT")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "bnexp" / "data"


def resolve_root(root: str | None) -> Path:
    """Resolve ``data.root`` (None means :func:`default_data_root`) to an absolute path, symlinks followed.

    Raises:
        DataError: the root (or a folder above it) is a symlink loop or a dangling symlink, named
            with the key or variable it came from.
    """
    from bnexp.runfolders.paths import link_problem_message

    path = Path(root).expanduser() if root else default_data_root()
    source = "data.root" if root else ("BNEXP_DATA_ROOT" if os.environ.get("BNEXP_DATA_ROOT") else "the default")
    problem = link_problem_message(path, f"the data root ({source})",
                                   "Point data.root (or BNEXP_DATA_ROOT) at the folder that holds the data.")
    if problem:
        raise DataError(problem)
    return path.resolve()


def _require_files(dataset: str, kind: str, root: Path, folder: Path, names: list[str]) -> None:
    """Raise DataError naming the expected files and the fix when any of ``names`` is missing."""
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DataError(
            f"{dataset} not found under data root {root}: expected the {kind} {', '.join(names)} in "
            f"{folder} (missing: {', '.join(missing)}). Point the root at a folder that holds "
            f"{folder.relative_to(root)}/ with data.root=PATH or the BNEXP_DATA_ROOT environment variable, "
            "or add data.download=true to fetch it (needs internet)."
        )


def check_mnist_files(root: Path) -> None:
    """Check the four MNIST IDX files under ``root/MNIST/raw``: present, right size, right header
    (magic number = unsigned-byte type and dimensions, item count, 28x28 images), and content:
    every label within the class range 0..9; then each against the data root's own ``SHA256SUMS``
    when it has one (:func:`check_manifest`).

    Raises:
        DataError: naming the missing or corrupt file and how to fix it.
    """
    raw = root / "MNIST" / "raw"
    _require_files("MNIST", "uncompressed IDX files", root, raw, list(MNIST_FILES))
    for name, (magic, count, item_bytes) in MNIST_FILES.items():
        path = raw / name
        header_len = 16 if magic == 2051 else 8
        expected = header_len + count * item_bytes
        size = path.stat().st_size
        with open(path, "rb") as f:
            header = f.read(header_len)
        got_magic = int.from_bytes(header[:4], "big") if len(header) >= 4 else None
        got_count = int.from_bytes(header[4:8], "big") if len(header) >= 8 else None
        if got_magic != magic or got_count != count:
            raise DataError(
                f"MNIST file {path} has a bad IDX header (magic {got_magic}, {got_count} items; "
                f"expected magic {magic} and {count} items): the copy is corrupt. Replace it with "
                "the official uncompressed file, or delete it and run with data.download=true."
            )
        if size != expected:
            raise DataError(
                f"MNIST file {path} has {size} bytes, expected {expected}: the copy is truncated or "
                "corrupt. Replace it with the official uncompressed file, or delete it and run with "
                "data.download=true."
            )
        if magic == 2051:
            rows, cols = int.from_bytes(header[8:12], "big"), int.from_bytes(header[12:16], "big")
            if (rows, cols) != (28, 28):
                raise DataError(f"MNIST file {path} holds {rows}x{cols} images, expected 28x28: the copy is "
                                "corrupt or not MNIST. Replace it with the official uncompressed file.")
        else:
            check_labels(path, path.read_bytes()[header_len:], 10)
    check_manifest(root, [raw / n for n in MNIST_FILES])  # after the structure: a truncated file is named so


def check_labels(path: Path, labels, num_classes: int) -> None:
    """Every label must be an integer class index in 0..num_classes-1.

    Args:
        path: the file the labels come from (named in the message).
        labels: bytes, a sequence of ints, or a numpy array.

    Raises:
        DataError: naming the file, the first bad label and its position.
    """
    import numpy as np

    arr = np.frombuffer(labels, dtype=np.uint8) if isinstance(labels, (bytes, bytearray)) else np.asarray(labels)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"the labels in {path} are of type {arr.dtype}, not integers: the copy is corrupt. "
                        "Replace it with the official file.")
    bad = np.flatnonzero((arr < 0) | (arr >= num_classes)) if arr.size else []
    if len(bad):
        raise DataError(f"the labels in {path} must be class indices 0..{num_classes - 1}, but label "
                        f"{int(arr[bad[0]])} is at position {int(bad[0])} ({len(bad)} labels out of range): "
                        "the copy is corrupt. Replace it with the official file, or delete it and run with "
                        "data.download=true.")


def load_mnist(root: Path, download: bool) -> TensorData:
    """Load MNIST through ``torchvision.datasets.MNIST`` as uint8-derived tensors (unscaled, 0..255).

    Raises:
        DataError: files missing (and download off, or download failing) or corrupt.
    """
    from torchvision.datasets import MNIST

    raw = root / "MNIST" / "raw"
    if download and not all((raw / n).is_file() for n in MNIST_FILES):
        try:
            MNIST(str(root), train=True, download=True)
        except Exception as exc:  # network errors come in many types
            raise DataError(
                f"could not download MNIST into {root} ({type(exc).__name__}: {exc}). Without "
                "internet, copy the four uncompressed IDX files into MNIST/raw/ under a folder and "
                "point data.root (or BNEXP_DATA_ROOT) at it."
            ) from None
    check_mnist_files(root)
    train = MNIST(str(root), train=True, download=False)
    test = MNIST(str(root), train=False, download=False)
    return TensorData(
        train_x=train.data.unsqueeze(1).float(),
        train_y=train.targets.long(),
        test_x=test.data.unsqueeze(1).float(),
        test_y=test.targets.long(),
        num_classes=10,
        name="mnist",
    )


CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR_FILES = CIFAR_TRAIN + ["test_batch", "batches.meta"]


def _cifar_md5s() -> dict[str, str]:
    from torchvision.datasets import CIFAR10

    md5 = {name: digest for name, digest in CIFAR10.train_list + CIFAR10.test_list}
    md5[CIFAR10.meta["filename"]] = CIFAR10.meta["md5"]
    return md5


MANIFEST = "SHA256SUMS"
_MANIFEST_OK: dict = {}  # (path, size, mtime_ns, inode) -> the sha256 that matched (a file is hashed once)


def check_manifest(root: Path, paths: list[Path]) -> None:
    """Check ``paths`` against the data root's own checksum list, when it has one: ``root/SHA256SUMS``
    in ``sha256sum`` format (``DIGEST  ./relative/path``), as ../shared/data carries for its copy.
    A listed file whose sha256 differs is named (every one, not just the first); files the list does
    not name, or a root without a list, pass. This is how a non-canonical copy, which cannot match the
    official md5s, still has each of its files checked.

    Raises:
        DataError: naming each file whose sha256 differs from the list, and the list.
    """
    import hashlib

    manifest = root / MANIFEST
    try:
        lines = manifest.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return
    want = {}
    for line in lines:
        digest, _, name = line.strip().partition(" ")
        if len(digest) == 64 and name:
            want[os.path.normpath(root / name.strip().lstrip("*"))] = digest.lower()
    bad = []
    for path in paths:
        digest = want.get(os.path.normpath(path))
        if digest is None:
            continue
        st = os.stat(path)
        key = (os.path.normpath(path), st.st_size, st.st_mtime_ns, st.st_ino)
        if _MANIFEST_OK.get(key) == digest:
            continue
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if h.hexdigest() == digest:
            _MANIFEST_OK[key] = digest
        else:
            bad.append(Path(path))
    if bad:
        names = ", ".join(str(p) for p in bad)
        raise DataError(f"{'file' if len(bad) == 1 else 'files'} {names} of the data root {root} "
                        f"{'does' if len(bad) == 1 else 'do'} not match the sha256 listed in {manifest}: the copy "
                        "is corrupt. Replace the file(s) from a good copy.")


def check_cifar10_files(root: Path, verify_checksums: bool) -> None:
    """Check the CIFAR-10 python-version batch files under ``root/cifar-10-batches-py``.

    Presence always; each file against the data root's own ``SHA256SUMS`` when it has one
    (:func:`check_manifest`); with ``verify_checksums`` each file's md5 against torchvision's list of
    the official files; and ``batches.meta``'s structure (:func:`check_cifar10_meta`).

    Raises:
        DataError: naming the missing file, or every file whose checksum differs, and the fix.
    """
    folder = root / CIFAR_FOLDER
    _require_files("CIFAR-10", "python-version batch files", root, folder, CIFAR_FILES)
    check_manifest(root, [folder / n for n in CIFAR_FILES])
    if verify_checksums:
        from torchvision.datasets.utils import check_integrity

        bad = [name for name, md5 in _cifar_md5s().items() if not check_integrity(str(folder / name), md5)]
        if bad:
            which = (f"file {folder / bad[0]} does" if len(bad) == 1
                     else f"files {', '.join(bad)} in {folder} do")
            raise DataError(
                f"CIFAR-10 {which} not match the md5 of the official file{'s' if len(bad) > 1 else ''} "
                "(torchvision's list), so the copy is corrupt or not the canonical one. If it is a known "
                "non-canonical copy of the standard layout (for example the re-encoded copy in "
                "../shared/data), load it anyway with data.verify_checksums=false; otherwise replace "
                "it, or delete it and run with data.download=true."
            )
    check_cifar10_meta(folder / "batches.meta")


def check_cifar10_meta(path: Path) -> None:
    """``batches.meta`` must be what torchvision's CIFAR10 reads: a pickle of a dict whose
    ``label_names`` are the 10 class names (text), and ``num_vis`` 3072 (= 32*32*3) when present.

    Raises:
        DataError: naming the file and what is wrong.
    """
    import pickle

    try:
        with open(path, "rb") as f:
            meta = pickle.load(f, encoding="latin1")
    except Exception as exc:  # random bytes raise many kinds of errors
        raise DataError(f"CIFAR-10 file {path} is not a readable batches.meta ({type(exc).__name__}: "
                        f"{str(exc)[:80]}): the copy is corrupt. Replace it with the official file.") from None
    names = meta.get("label_names") if isinstance(meta, dict) else None
    if not (isinstance(names, list) and len(names) == 10 and all(isinstance(n, (str, bytes)) for n in names)):
        raise DataError(f"CIFAR-10 file {path} does not hold the 10 class names under label_names "
                        f"(found {type(meta).__name__}"
                        f"{' with keys ' + ', '.join(map(str, list(meta)[:5])) if isinstance(meta, dict) else ''}): "
                        "the copy is corrupt or not CIFAR-10. Replace it with the official file.")
    if isinstance(meta, dict) and meta.get("num_vis", 3072) != 3072:
        raise DataError(f"CIFAR-10 file {path} says num_vis={meta['num_vis']}, expected 3072 (32x32x3): "
                        "not CIFAR-10. Replace it with the official file.")


def _cifar10_reader():
    """torchvision's CIFAR10 reader, made to read one named batch file of the python layout.

    The integrity check is :func:`check_cifar10_files`'s (presence, and the official md5s unless
    ``data.verify_checksums=false``), so torchvision's own md5 checks are turned off here: they
    would refuse a non-canonical copy of the standard layout, such as the re-encoded copy in
    ../shared/data.
    """
    from torchvision.datasets import CIFAR10

    class CIFAR10Batch(CIFAR10):
        def __init__(self, root: Path, name: str):
            self.train_list = [[name, None]]  # read by CIFAR10.__init__: the one file to load
            super().__init__(str(root), train=True, download=False)

        def _check_integrity(self) -> bool:
            return True  # done by check_cifar10_files

        def _load_meta(self) -> None:
            pass  # class names are not used; batches.meta is checked by check_cifar10_files

    return CIFAR10Batch


def _read_cifar_batch(root: Path, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One CIFAR-10 python batch through torchvision: images (10000, 3, 32, 32) uint8 and labels
    (10000,) int64.

    Raises:
        DataError: the pickle is unreadable or has the wrong structure, sizes or pixel type.
    """
    import numpy as np

    path = root / CIFAR_FOLDER / name
    try:
        batch = _cifar10_reader()(root, name)
        data, labels = np.asarray(batch.data), np.asarray(batch.targets)
    except Exception as exc:  # truncated or foreign pickles raise many exception types
        raise DataError(
            f"CIFAR-10 file {path} is unreadable ({type(exc).__name__}: {exc}): the copy is truncated "
            "or corrupt. Replace it with the official file, or delete it and run with data.download=true."
        ) from None
    if data.shape != (10000, 32, 32, 3) or len(labels) != 10000:
        raise DataError(
            f"CIFAR-10 file {path} holds {len(data)} images of shape {data.shape[1:]} with {len(labels)} labels; "
            "expected 10000 images of 32x32x3 and 10000 labels. Replace the file with a correct copy."
        )
    if data.dtype != np.uint8:  # pixels are bytes 0..255; anything else would be silently wrapped
        raise DataError(f"CIFAR-10 file {path} holds pixels of type {data.dtype}, expected uint8 (0..255): "
                        "the copy is corrupt or not CIFAR-10. Replace it with the official file.")
    check_labels(path, labels, 10)
    return torch.from_numpy(data).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(labels.astype(np.int64))


def load_cifar10(root: Path, download: bool, verify_checksums: bool) -> TensorData:
    """Load CIFAR-10 (python version, torchvision's layout) as tensors (unscaled, 0..255), with
    ``torchvision.datasets.CIFAR10``'s reader, one batch file at a time.

    With ``verify_checksums`` (default) every file must match the official md5s. With
    ``verify_checksums=false`` a non-canonical copy of the same layout (same structure, other
    bytes) is read, with a warning; torchvision's own md5 check, which would refuse it, is then
    not applied (:func:`_cifar10_reader`). Either way every batch's shape, pixel type and labels
    are checked.

    Raises:
        DataError: files missing, unreadable, of the wrong shape, or failing the md5 check.
    """
    folder = root / CIFAR_FOLDER
    if download and not all((folder / n).is_file() for n in CIFAR_FILES):
        from torchvision.datasets import CIFAR10

        try:
            CIFAR10(str(root), train=True, download=True)
        except Exception as exc:
            raise DataError(
                f"could not download CIFAR-10 into {root} ({type(exc).__name__}: {exc}). Without internet, "
                "copy cifar-10-batches-py/ under a folder and point data.root (or BNEXP_DATA_ROOT) at it."
            ) from None
    check_cifar10_files(root, verify_checksums)
    if not verify_checksums:
        _unverified(folder)
    parts = [_read_cifar_batch(root, n) for n in CIFAR_TRAIN]
    train_x, train_y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    test_x, test_y = _read_cifar_batch(root, "test_batch")
    return TensorData(train_x.float(), train_y.long(), test_x.float(), test_y.long(), 10, "cifar10")


def _unverified(folder: Path) -> None:
    """Logs the one warning (terminal and train.log) for a CIFAR-10 copy read with data.verify_checksums=false."""
    log.warning("data.verify_checksums=false: loading the CIFAR-10 copy in %s WITHOUT checking it against the "
                "official md5s (a non-canonical copy of the standard layout); accuracies may differ a little "
                "from published figures.", folder)


# The validation split is one fixed draw, the same for every run and seed (docs/configuration.md): a run's
# seed changes its initialization and data order, never which images it may evaluate on.
VALIDATION_SPLIT_SEED = 20150211  # the paper's arXiv date


def hold_out(data: TensorData, n: int) -> TensorData:
    """The validation split (``data.validation=N``): ``n`` training images, chosen by one fixed seeded
    permutation (:data:`VALIDATION_SPLIT_SEED`), become the evaluation set, and the rest stay the training
    set; the test set is dropped, so no tuning decision can read it. Both parts keep the images' original
    order. ``n`` = 0 returns ``data`` unchanged.

    Args:
        data: the dataset as loaded (train_x (N, C, H, W), train_y (N,), ...), before scaling.
        n: images to hold out, 0 <= n < N.

    Returns:
        TensorData with train_x (N - n, C, H, W), test_x (n, C, H, W) and ``eval_split="validation"``.

    Raises:
        DataError: ``n`` not in [0, N) (the message names ``data.validation``).
    """
    total = len(data.train_y)
    if n == 0:
        return data
    if not 0 < n < total:
        raise DataError(f"data.validation={n}: the validation split must hold between 1 and {total - 1} of "
                        f"{data.name}'s {total} training images (0: evaluate on the test set)")
    perm = torch.randperm(total, generator=torch.Generator().manual_seed(VALIDATION_SPLIT_SEED))
    held = torch.zeros(total, dtype=torch.bool)
    held[perm[:n]] = True
    keep = (~held).nonzero().squeeze(1).to(data.train_y.device)
    val = held.nonzero().squeeze(1).to(data.train_y.device)
    return TensorData(data.train_x[keep], data.train_y[keep], data.train_x[val], data.train_y[val],
                      data.num_classes, data.name, "validation")


def scale(data: TensorData, scaling: str) -> TensorData:
    """Scale 0..255 pixels: ``unit`` divides by 255; ``standardize`` z-scores each channel
    with the training set's per-channel mean and std. Shapes are unchanged."""
    train_x = data.train_x / 255.0
    test_x = data.test_x / 255.0
    if scaling == "standardize":
        mean = train_x.mean(dim=(0, 2, 3), keepdim=True)
        std = train_x.std(dim=(0, 2, 3), keepdim=True)
        train_x = (train_x - mean) / std
        test_x = (test_x - mean) / std
    return TensorData(train_x, data.train_y, test_x, data.test_y, data.num_classes, data.name, data.eval_split)


def load_data(cfg, device: torch.device) -> TensorData:
    """Load the dataset named by ``cfg.name`` from ``cfg.root`` onto ``device``, scaled. A process keeps the
    last dataset it loaded: a later run with the same data settings, device and unchanged files (same size
    and modification time) gets the same tensors without reading the files again.

    Args:
        cfg: the ``data`` config node (name, root, download, scaling, ...).
        device: where the tensors live during training.

    Raises:
        DataError: unknown dataset, missing or corrupt files.
    """
    root = resolve_root(cfg.root)
    validation = int(cfg.get("validation", 0) or 0)
    key = (cfg.name, str(root), bool(cfg.download), bool(cfg.verify_checksums), str(cfg.scaling), str(device),
           validation, _files_signature(root))
    if key in _LOADED:  # a process that trains several runs (a sweep's in-process jobs) reads the files once
        data = _LOADED[key]
        if cfg.name == "cifar10" and not cfg.verify_checksums:
            _unverified(root / CIFAR_FOLDER)  # each run's train.log says so, as on a first load
    else:
        _LOADED.clear()  # one dataset at a time (CIFAR-10's tensors are about 740 MB), freed before the next loads
        if cfg.name == "mnist":
            data = load_mnist(root, cfg.download)
        elif cfg.name == "cifar10":
            data = load_cifar10(root, cfg.download, cfg.verify_checksums)
        else:
            raise DataError(f"unknown dataset data.name={cfg.name!r}: available: mnist, cifar10.")
        data = scale(hold_out(data, validation), cfg.scaling)  # standardize: statistics of the kept images
        data = TensorData(data.train_x.to(device), data.train_y.to(device), data.test_x.to(device),
                          data.test_y.to(device), data.num_classes, data.name, data.eval_split)
        _LOADED[key] = data
    if data.eval_split == "validation":
        log.info("data: %s from %s (%d train images; %d validation images held out of the training set, "
                 "evaluated instead of the test set, which this run never reads; shape %s)", data.name, root,
                 len(data.train_y), len(data.test_y), tuple(data.input_shape))
    else:
        log.info("data: %s from %s (%d train, %d test images of shape %s)", data.name, root,
                 len(data.train_y), len(data.test_y), tuple(data.input_shape))
    return data


# The last dataset load_data returned, keyed by its config, device and files: nothing changes the tensors in
# place (the sampler indexes them, augmentation makes new ones), so runs of one process share them.
_LOADED: dict[tuple, TensorData] = {}


def _files_signature(root: Path) -> tuple:
    """(name, size, mtime in ns) of every file a dataset is read from (MNIST's raw files, CIFAR-10's batches,
    the root's ``SHA256SUMS``): a file replaced or rewritten between two runs of one process is read again."""
    sig = []
    for path in [root / MANIFEST, *((root / "MNIST" / "raw" / n) for n in MNIST_FILES),
                 *((root / CIFAR_FOLDER / n) for n in CIFAR_FILES)]:
        try:
            st = path.stat()
            sig.append((str(path), st.st_size, st.st_mtime_ns))
        except OSError:
            sig.append((str(path), None, None))
    return tuple(sig)


def host_to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor drawn by a seeded CPU generator, on ``device``: on CUDA copied from pinned memory
    without blocking (the step loop makes no host synchronisation; the values are the CPU draw's, so a run's
    data order is the same on every device); elsewhere ``t.to(device)`` (on the CPU ``t`` itself)."""
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


class BatchSampler:
    """Draws mini-batch indices from a seeded permutation, reshuffled every epoch.

    An epoch is one pass over ``n`` examples in permuted order; the last partial
    mini-batch of an epoch is dropped, so every mini-batch has exactly
    ``batch_size`` examples (BN statistics never see a smaller m).

    Args:
        n: number of training examples.
        batch_size: mini-batch size m (<= n).
        seed: seeds the permutation generator.
        device: where the index tensors are created.
    """

    def __init__(self, n: int, batch_size: int, seed: int, device: torch.device):
        if batch_size > n:
            raise DataError(f"trainer.batch_size={batch_size} is larger than the training set ({n}).")
        self.n, self.batch_size, self.device = n, batch_size, device
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.epoch = 0
        self.position = 0
        self.perm = self._new_perm()

    def _new_perm(self) -> torch.Tensor:
        return host_to_device(torch.randperm(self.n, generator=self.generator), self.device)

    def next(self) -> torch.Tensor:
        """Indices of the next mini-batch, shape (batch_size,), int64 on ``device``."""
        if self.position + self.batch_size > self.n:
            self.perm = self._new_perm()
            self.epoch += 1
            self.position = 0
        idx = self.perm[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return idx

    def state_dict(self) -> dict:
        """Everything needed to continue the exact same sequence of mini-batches."""
        return {"generator": self.generator.get_state(), "epoch": self.epoch,
                "position": self.position, "perm": self.perm.cpu()}

    def load_state_dict(self, state: dict) -> None:
        """Restore a state from :meth:`state_dict` (the generator state a CPU ``ByteTensor`` wherever it was loaded)."""
        self.generator.set_state(state["generator"].cpu())
        self.epoch, self.position = state["epoch"], state["position"]
        self.perm = state["perm"].to(self.device)


class Augmenter:
    """Random crops with zero padding and horizontal flips, on a whole mini-batch at once.

    The standard CIFAR-10 augmentation, done as batched tensor operations on the
    training device: each image is padded by ``pad`` pixels on every side, a random
    HxW window is cut out (offsets uniform in [0, 2*pad]) and, with probability 1/2,
    mirrored left-right. Labels are unchanged. A seeded generator makes it reproducible.

    Args:
        pad: padding in pixels (4 for CIFAR-10).
        flip: also apply random horizontal flips.
        seed: seeds the generator.
        device: where the images live.
    """

    def __init__(self, pad: int = 4, flip: bool = True, seed: int = 0, device: torch.device | str = "cpu"):
        self.pad, self.flip = pad, flip
        self.device = torch.device(device)
        self.generator = torch.Generator(device="cpu").manual_seed(seed + 7919)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: (N, C, H, W) -> augmented (N, C, H, W), a new tensor."""
        n, _, h, w = x.shape
        p = self.pad
        if p > 0:
            padded = torch.nn.functional.pad(x, (p, p, p, p))
            dy = host_to_device(torch.randint(0, 2 * p + 1, (n,), generator=self.generator), x.device)
            dx = host_to_device(torch.randint(0, 2 * p + 1, (n,), generator=self.generator), x.device)
            rows = (dy.view(n, 1) + torch.arange(h, device=x.device).view(1, h))  # (N, H)
            cols = (dx.view(n, 1) + torch.arange(w, device=x.device).view(1, w))  # (N, W)
            batch = torch.arange(n, device=x.device).view(n, 1, 1)
            # gather the window: (N, H, W, C) -> (N, C, H, W)
            x = padded.permute(0, 2, 3, 1)[batch, rows.view(n, h, 1), cols.view(n, 1, w)].permute(0, 3, 1, 2)
        if self.flip:
            mask = host_to_device(torch.rand(n, generator=self.generator) < 0.5, x.device)
            x = torch.where(mask.view(n, 1, 1, 1), x.flip(3), x)
        return x.contiguous()

    def state_dict(self) -> dict:
        """The generator state (for exact resumption)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (the generator state a CPU ``ByteTensor`` wherever it was loaded)."""
        self.generator.set_state(state["generator"].cpu())


def make_augmenter(cfg, seed: int, device: torch.device) -> Augmenter | None:
    """The training-set augmentation of ``data.augment`` (None when off).

    ``data.augment`` false/off: none; true/standard: 4-pixel-pad random crops and
    horizontal flips; light: flips only (the paper's "fewer photometric distortions",
    Sec. 4.2.1, in spirit).
    """
    mode = str(cfg.augment).lower()
    if mode in ("false", "off", "none"):
        return None
    if mode in ("true", "standard"):
        return Augmenter(pad=4, flip=True, seed=seed, device=device)
    if mode == "light":
        return Augmenter(pad=0, flip=True, seed=seed, device=device)
    raise ValueError(f"unknown data.augment {cfg.augment!r}")
