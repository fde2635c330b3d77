"""Small sources shared by the tests."""

BAD = "from timm.utils import ModelEmaV2\n\nema = ModelEmaV2(model, decay=0.99)\n"
GOOD = "from timm.utils import ModelEmaV2\n\nema = ModelEmaV2(model, decay=0.9998)\n"
