"""Data and model helpers shared by the evidence experiments.

The data is a synthetic classification problem: each of the ten classes is a
mixture of three Gaussian clusters in 32 dimensions, and a share of the training
labels is replaced by random ones. Label noise and a constant, fairly large
learning rate keep the online weights moving around the optimum, which is the
situation weight averaging is meant for.
"""

import torch
from torch import nn

N_FEATURES = 32
N_CLASSES = 10
CLUSTERS_PER_CLASS = 3
# Set by ``run_all.py --quick`` to shorten every epoch; None means the full data.
MAX_TRAIN_SAMPLES = None


def make_dataset(
    seed: int,
    n_train: int = 20480,
    n_val: int = 4096,
    spread: float = 1.5,
    label_noise: float = 0.3,
):
    """Return ``(x_train, y_train), (x_val, y_val)``; validation labels are clean."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    n_clusters = N_CLASSES * CLUSTERS_PER_CLASS
    centers = torch.randn(n_clusters, N_FEATURES, generator=gen)

    def sample(n: int, noise: float):
        cluster = torch.randint(0, n_clusters, (n,), generator=gen)
        x = centers[cluster] + spread * torch.randn(n, N_FEATURES, generator=gen)
        y = cluster % N_CLASSES
        if noise > 0:
            flip = torch.rand(n, generator=gen) < noise
            random_labels = torch.randint(0, N_CLASSES, (n,), generator=gen)
            y = torch.where(flip, random_labels, y)
        return x, y

    return sample(n_train, label_noise), sample(n_val, 0.0)


class TensorLoader:
    """A minimal in-memory data loader yielding ``(x, y)`` batches.

    It behaves like a ``DataLoader`` over a ``TensorDataset`` (so it works with
    ``update_bn``) but slices whole batches at once, which is much faster for
    tiny models on CPU.
    """

    def __init__(self, x, y, batch_size: int, shuffle: bool = False, seed: int = 0):
        self.x = x
        self.y = y
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return (len(self.x) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        n = len(self.x)
        order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
        for start in range(0, n, self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.x[idx], self.y[idx]


def make_loaders(
    seed: int,
    batch_size: int = 32,
    val_batch_size: int = 1024,
    n_train: int = 20480,
    label_noise: float = 0.3,
    spread: float = 1.5,
):
    """Training loader (shuffled, seeded) and validation loader."""
    (x_train, y_train), (x_val, y_val) = make_dataset(
        seed, n_train=n_train, spread=spread, label_noise=label_noise
    )
    x_train, y_train = x_train[:MAX_TRAIN_SAMPLES], y_train[:MAX_TRAIN_SAMPLES]
    train_loader = TensorLoader(x_train, y_train, batch_size, shuffle=True, seed=seed)
    val_loader = TensorLoader(x_val, y_val, val_batch_size)
    return train_loader, val_loader


def make_spirals(seed: int, n: int, turns: float = 3.0, noise: float = 0.08):
    """Three interleaved 2-D spirals: slow for an MLP to learn (many epochs)."""
    gen = torch.Generator().manual_seed(20_000 + seed)
    y = torch.randint(0, 3, (n,), generator=gen)
    r = torch.rand(n, generator=gen)
    angle = 2 * torch.pi * (turns * r + y / 3)
    x = torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)
    x = 3 * x + noise * torch.randn(n, 2, generator=gen)
    return x, y


def make_spiral_loaders(
    seed: int,
    batch_size: int = 64,
    val_batch_size: int = 1024,
    n_train: int = 4096,
    n_val: int = 4096,
    turns: float = 3.0,
):
    """Loaders over the spiral problem (clean labels, 2 features, 3 classes)."""
    x_train, y_train = make_spirals(seed, n_train, turns)
    x_train, y_train = x_train[:MAX_TRAIN_SAMPLES], y_train[:MAX_TRAIN_SAMPLES]
    x_val, y_val = make_spirals(seed + 500, n_val, turns)
    train_loader = TensorLoader(x_train, y_train, batch_size, shuffle=True, seed=seed)
    val_loader = TensorLoader(x_val, y_val, val_batch_size)
    return train_loader, val_loader


def make_model(
    hidden: int = 128,
    depth: int = 2,
    dropout: float = 0.0,
    in_features: int = N_FEATURES,
    n_classes: int = N_CLASSES,
) -> nn.Module:
    """An MLP with BatchNorm (and optional Dropout) after every hidden layer."""
    layers = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU()]
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        width = hidden
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)
