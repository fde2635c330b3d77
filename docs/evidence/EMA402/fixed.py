import torch
from common import make_model, make_spiral_loaders
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel

EPOCHS = 40
SWA_START = 30
LR = 0.1
SWA_LR = 0.05


@torch.no_grad()
def evaluate(net, loader):
    correct = 0
    total = 0
    for x, y in loader:
        correct += (net(x).argmax(dim=1) == y).sum().item()
        total += y.numel()
    return correct / total


def main(seed: int, on_epoch_end=None) -> dict:
    torch.manual_seed(seed)
    train_loader, val_loader = make_spiral_loaders(seed)
    model = make_model(depth=3, in_features=2, n_classes=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
    swa_model = AveragedModel(model)
    swa_scheduler = SWALR(optimizer, swa_lr=SWA_LR, anneal_epochs=3)
    criterion = nn.CrossEntropyLoss()

    history = {"online": []}
    for epoch in range(EPOCHS):
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        if epoch >= SWA_START:
            swa_model.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()

        model.eval()
        history["online"].append(evaluate(model, val_loader))
        model.train()
        if on_epoch_end is not None:
            on_epoch_end(epoch, swa_model, train_loader, val_loader)
    torch.optim.swa_utils.update_bn(train_loader, swa_model)

    swa_model.eval()
    history["final_online"] = history["online"][-1]
    history["final_averaged"] = evaluate(swa_model, val_loader)
    print(f"online {history['final_online']:.4f} swa {history['final_averaged']:.4f}")
    return history


if __name__ == "__main__":
    main(seed=0)
