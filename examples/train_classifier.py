"""A small image-classifier training script with weight averaging, as people write it.

It trains, but its averaged models are misconfigured: run `ema-lint examples/` to see how.
"""

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from timm.utils import ModelEmaV3

EMA_DECAY = 0.99  # copied from a fine-tuning recipe
EPOCHS = 90
ACCUM_STEPS = 4


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.2),
        nn.Linear(32, 10),
    )


def evaluate(net: nn.Module, loader) -> float:
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            correct += (net(images).argmax(1) == labels).sum().item()
            total += labels.numel()
    return correct / total


def train(train_loader, val_loader, device="cuda"):
    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ema = ModelEmaV3(model, decay=EMA_DECAY)
    swa_style_ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.99999))
    for epoch in range(EPOCHS):
        model.train()
        for step, (images, labels) in enumerate(train_loader):
            images, labels = images.to(device), labels.to(device)
            loss = F.cross_entropy(model(images), labels) / ACCUM_STEPS
            loss.backward()
            if (step + 1) % ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
            ema.update(model)
            swa_style_ema.update_parameters(model)
        model.eval()
        print(epoch, evaluate(model, val_loader), evaluate(swa_style_ema, val_loader))
    return copy.deepcopy(ema.module)
