"""A synthetic training script that uses weight averaging the way real projects do.

The concatenation benchmark (``benchmarks/concat.py``) repeats it N times in one module:
every copy adds averaging objects (timm, torch ``AveragedModel``, ema-pytorch, torch-ema
and a hand-made ``deepcopy`` copy), a training loop with gradient accumulation, an
evaluation that swaps the averaged weights in, a Lightning module with per-batch hooks, and
configuration read through argparse and a dataclass. Written for this project (no
third-party code), so the benchmark can run without the downloaded corpus.
"""

from __future__ import annotations

TRAINING_FILE = '''\
import argparse
import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, get_ema_multi_avg_fn, update_bn
from timm.utils import ModelEmaV3
from ema_pytorch import EMA
from torch_ema import ExponentialMovingAverage
import lightning.pytorch as pl


@dataclass
class TrainConfig:
    lr: float = 3e-4
    epochs: int = 90
    accum_steps: int = 4
    ema_decay: float = 0.9998
    swa_start: int = 60
    warmup: int = 2000


def get_args():
    parser = argparse.ArgumentParser(description="train a classifier")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--model-ema-decay", type=float, default=0.9998)
    parser.add_argument("--accum-steps", type=int, default=4)
    parser.add_argument("--swa-lr", type=float, default=0.05)
    return parser.parse_args()


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.BatchNorm1d(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.fc2(self.drop(F.gelu(self.fc1(self.norm(x)))))


class Net(nn.Module):
    def __init__(self, dim=256, depth=6, classes=1000):
        super().__init__()
        self.stem = nn.Linear(3 * 32 * 32, dim)
        self.blocks = nn.Sequential(*[Block(dim, dim * 4) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem(x.flatten(1))
        x = self.blocks(x)
        return self.head(x)


class MeanTeacher:
    """A hand-made averaged copy updated after each step."""

    def __init__(self, model, decay=0.999):
        self.decay = decay
        self.shadow = copy.deepcopy(model)
        for p in self.shadow.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for s, p in zip(self.shadow.parameters(), model.parameters()):
            s.mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)


def build_optimizer(model, cfg):
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.ndim <= 1 or name.endswith(".bias"):
            no_decay.append(param)
        else:
            decay.append(param)
    groups = [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr)


def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, targets in loader:
            images, targets = images.to(device), targets.to(device)
            logits = model(images)
            correct += (logits.argmax(-1) == targets).sum().item()
            total += targets.numel()
    return correct / max(total, 1)


def train_one_epoch(model, model_ema, teacher, ema_tracker, loader, optimizer, scaler, cfg, device):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for step, (images, targets) in enumerate(loader):
        images, targets = images.to(device), targets.to(device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), targets, label_smoothing=0.1)
        scaler.scale(loss / cfg.accum_steps).backward()
        if (step + 1) % cfg.accum_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            model_ema.update(model, step=step)
            teacher.update(model)
            ema_tracker.update()


def main():
    args = get_args()
    cfg = TrainConfig(lr=args.lr, epochs=args.epochs, accum_steps=args.accum_steps)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net().to(device)
    optimizer = build_optimizer(model, cfg)
    scaler = torch.cuda.amp.GradScaler()
    model_ema = ModelEmaV3(model, decay=args.model_ema_decay, warmup=True)
    teacher = MeanTeacher(model, decay=0.996)
    ema_tracker = ExponentialMovingAverage(model.parameters(), decay=0.995)
    swa_model = AveragedModel(model)
    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    swa_scheduler = SWALR(optimizer, swa_lr=args.swa_lr, anneal_epochs=5)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=cfg.epochs)
    train_loader = torch.utils.data.DataLoader(range(10), batch_size=256, shuffle=True)
    val_loader = torch.utils.data.DataLoader(range(10), batch_size=512)
    best = 0.0
    for epoch in range(cfg.epochs):
        train_one_epoch(
            model, model_ema, teacher, ema_tracker, train_loader, optimizer, scaler, cfg, device
        )
        if epoch >= cfg.swa_start:
            swa_model.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()
        ema_model.update_parameters(model)
        acc = evaluate(model, val_loader, device)
        acc_ema = evaluate(model_ema.module, val_loader, device)
        with ema_tracker.average_parameters():
            acc_tracked = evaluate(model, val_loader, device)
        ema_tracker.store()
        ema_tracker.copy_to()
        acc_copied = evaluate(model, val_loader, device)
        ema_tracker.restore()
        acc_teacher = evaluate(teacher.shadow, val_loader, device)
        best = max(best, acc, acc_ema, acc_tracked, acc_copied, acc_teacher)
        torch.save({"model": model.state_dict(), "ema": model_ema.state_dict()}, "last.pt")
    update_bn(train_loader, swa_model, device=device)
    evaluate(swa_model, val_loader, device)
    return best


class LitClassifier(pl.LightningModule):
    def __init__(self, lr=1e-3, ema_decay=0.999):
        super().__init__()
        self.save_hyperparameters()
        self.net = Net()
        self.ema = EMA(self.net, beta=ema_decay, update_after_step=100, update_every=10)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train/loss", loss)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.ema.update()

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.ema(x)
        self.log("val/acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.net.parameters(), lr=self.hparams.lr, momentum=0.9)


def fit():
    trainer = pl.Trainer(max_epochs=10, accumulate_grad_batches=2, precision="bf16-mixed")
    trainer.fit(LitClassifier(), train_dataloaders=None)


if __name__ == "__main__":
    main()
'''


def averaging_objects_file(count: int) -> str:
    """A module that creates ``count`` averaged copies and updates each once per step."""
    lines = [
        "import copy",
        "import torch",
        "from timm.utils import ModelEmaV2",
        "",
        "def train(model, loader, optimizer):",
    ]
    for i in range(count):
        lines.append(f"    ema_{i} = ModelEmaV2(model, decay=0.999{i % 10})")
    lines += [
        "    for batch in loader:",
        "        loss = model(batch).mean()",
        "        loss.backward()",
        "        optimizer.step()",
        "        optimizer.zero_grad()",
    ]
    for i in range(count):
        lines.append(f"        ema_{i}.update(model)")
    return "\n".join(lines) + "\n"
