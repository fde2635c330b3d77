import copy

import torch
from common import make_loaders, make_model
from torch import nn

EPOCHS = 6
LR = 0.2
EMA_DECAY = 0.999


@torch.no_grad()
def evaluate(net, loader):
    correct = 0
    total = 0
    for x, y in loader:
        correct += (net(x).argmax(dim=1) == y).sum().item()
        total += y.numel()
    return correct / total


def update_ema(ema_model, model, decay):
    with torch.no_grad():
        for e, p in zip(ema_model.parameters(), model.parameters(), strict=True):
            e.copy_(decay * e + (1 - decay) * p)
        for eb, b in zip(ema_model.buffers(), model.buffers(), strict=True):
            eb.copy_(b)


def main(seed: int, epochs: int = EPOCHS) -> dict:
    torch.manual_seed(seed)
    train_loader, val_loader = make_loaders(seed, batch_size=32)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=5e-4)
    ema_model = copy.deepcopy(model)
    criterion = nn.CrossEntropyLoss()

    history = {"online": [], "averaged": []}
    for epoch in range(epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            update_ema(ema_model, model, EMA_DECAY)

        model.eval()
        history["online"].append(evaluate(model, val_loader))
        model.train()
        ema_model.eval()
        history["averaged"].append(evaluate(ema_model, val_loader))
        print(
            f"epoch {epoch}: online {history['online'][-1]:.4f} ema {history['averaged'][-1]:.4f}"
        )
    return history


if __name__ == "__main__":
    main(seed=0)
