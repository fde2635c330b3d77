import torch
from common import make_loaders, make_model
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

EPOCHS = 6
LR = 0.05


@torch.no_grad()
def evaluate(net, loader):
    correct = 0
    total = 0
    for x, y in loader:
        correct += (net(x).argmax(dim=1) == y).sum().item()
        total += y.numel()
    return correct / total


def main(seed: int, epochs: int = EPOCHS) -> dict:
    torch.manual_seed(seed)
    train_loader, val_loader = make_loaders(seed, batch_size=32, val_batch_size=32)
    model = make_model(dropout=0.3)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=5e-4)
    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
    criterion = nn.CrossEntropyLoss()

    history = {"online": [], "averaged": []}
    for epoch in range(epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            ema_model.update_parameters(model)

        model.eval()
        history["online"].append(evaluate(model, val_loader))
        model.train()
        history["averaged"].append(evaluate(ema_model, val_loader))
        print(
            f"epoch {epoch}: online {history['online'][-1]:.4f} ema {history['averaged'][-1]:.4f}"
        )
    return history


if __name__ == "__main__":
    main(seed=0)
