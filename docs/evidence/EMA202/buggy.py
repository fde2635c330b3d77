import torch
from common import make_loaders, make_model
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

EPOCHS = 12
LR = 0.2
MICRO_BATCH_SIZE = 8


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
    train_loader, val_loader = make_loaders(seed, batch_size=MICRO_BATCH_SIZE, n_train=8192)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
    criterion = nn.CrossEntropyLoss()
    accum_steps = 8

    history = {"online": [], "averaged": []}
    for epoch in range(epochs):
        for step, (x, y) in enumerate(train_loader):
            loss = criterion(model(x), y)
            loss = loss / accum_steps
            loss.backward()
            if (step + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
            ema_model.update_parameters(model)

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
