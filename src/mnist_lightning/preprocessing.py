"""Any picture of a digit -> what the model was trained on: an MNIST digit, uint8 [28, 28], light ink on black.

MNIST's authors made each digit this way: the black and white NIST scans "were size normalized to fit in a
20x20 pixel box while preserving their aspect ratio. The resulting images contain grey levels as a result of
the anti-aliasing technique used by the normalization algorithm. The images were centered in a 28x28 image
by computing the center of mass of the pixels, and translating the image so as to position this point at the
center of the 28x28 field." A photo or a scan first needs its ink told apart from the paper, whatever their
colours and the light; then ``to_mnist_digit`` follows that recipe. A digit that is already an MNIST digit
comes through unchanged (up to one grey level), but for MNIST's thinnest 3 %, whose strokes are thickened as a
thin pen's are.

``STEPS`` describes the steps in order; the export writes it into ``preprocessing.json``, so that a server
can reproduce them without this package. Nothing here imports Lightning: the file can be copied on its own.
"""

import numpy as np
import torch
from PIL import Image, ImageOps

MNIST_SIZE = 28  # the model's input is 28x28 pixels ...
DIGIT_BOX = 20  # ... with the digit's longer side scaled to 20 pixels
MAX_SIDE = 1024  # larger pictures are shrunk first: a digit needs far fewer pixels, and memory stays bounded
BORDER = 0.02  # the paper is read from the outer 2 % of each side (at least 1 pixel)
DARK = 16.0  # below this grey level a camera cannot tell how much light falls on the paper
MIN_CONTRAST = 0.06  # ink must differ from the paper by 6 % of black-to-white ...
MIN_SIGNAL_TO_NOISE = 6.0  # ... and by 6 times the paper's noise, or the picture counts as blank
BOX_LEVEL = 0.3  # the bounding box holds pixels with at least 30 % ink (where a blurred edge was) ...
BOX_NOISE = 6.0  # ... whose 3x3 mean stands 6 standard deviations (of that mean, on the paper) above the paper
NOISE_FLOOR = 3.0  # after scaling, ink within 3 standard deviations of the remaining noise is paper
SURROUND = 2  # pixels of the surroundings kept on each side when scaling, so edges keep their anti-aliasing
THIN_STROKE = 1.55  # strokes thinner than this at 20 px (97 % of MNIST's training digits' are wider) are ...
TYPICAL_STROKE = 2.4  # ... thickened to the training digits' median width (2.36), measured the same way
FINE = 4  # thickening works at 4x the final resolution

STEPS = [
    {
        "step": "read",
        "what": "Apply the EXIF orientation. Take the pixels as RGB on 0-255 (16-bit greyscale divided by 257) "
        "and, if any pixel is transparent, the alpha channel on 0-1.",
    },
    {
        "step": "shrink",
        "what": f"If the longer side exceeds {MAX_SIDE} px, shrink by the smallest integer factor that brings it "
        f"to {MAX_SIDE} px or less, averaging each block of pixels (Pillow Image.reduce). A JPEG is first decoded "
        f"at 1/2, 1/4 or 1/8 scale, the smallest no smaller than 1 / (longer side // {MAX_SIDE}) (Pillow "
        "Image.draft), and that result shrunk as above.",
    },
    {
        "step": "composite",
        "what": "Put transparent pixels on paper: if at least half the alpha is opaque, the paper is the median "
        "colour of the pixels with alpha >= 0.5; otherwise the opaque pixels are the ink, and the paper is white "
        "under dark ink (alpha-weighted mean grey < 128) and black under light ink. Fully transparent: blank.",
    },
    {
        "step": "paper",
        "what": f"Border = the outer {BORDER:.0%} of each side (at least 1 px). Fit the paper colour as a "
        "quadratic surface in x and y (least squares per channel) to the border pixels, twice, each time "
        "leaving out pixels farther from the previous fit (the first time: from the border's median colour) "
        "than the median distance + max(3 x 1.4826 x MAD, 2 levels). Uneven light is paper, too.",
    },
    {
        "step": "light",
        "what": f"Offset = pixel colour - paper colour, multiplied by the light's gain: max(brightest paper grey, "
        f"{DARK:g}) / max(paper grey here, {DARK:g}) (grey = mean of R, G, B). Ink in a shadow then counts as "
        "much as ink in full light.",
    },
    {
        "step": "polarity",
        "what": "Candidates = pixels whose offset length is at least half the largest 3x3 mean of offset "
        "lengths. Ink direction = the candidates' median offset, normalized; contrast = the largest candidate "
        "offset along it. Ink level = offset . direction / contrast: paper 0, ink 1, whether the ink is darker, "
        "lighter or another colour than the paper.",
    },
    {
        "step": "blank",
        "what": f"Noise = 1.4826 x the median absolute deviation of ink level / gain over the border (noise "
        f"before the light's gain, which amplifies it in shadows). If the "
        f"contrast is below {MIN_CONTRAST:.0%} of the black-to-white distance (255 x sqrt(3)) or below "
        f"{MIN_SIGNAL_TO_NOISE:g} x noise, the picture holds no ink: it is reported as blank, not as a digit.",
    },
    {
        "step": "crop",
        "what": f"Bounding box of the pixels with ink level >= {BOX_LEVEL}, a 3x3 mean of ink level / gain at "
        f"least {BOX_NOISE:g} x (1.4826 x MAD of that mean over the border) above that border's median, and at "
        "least one such pixel among their 8 neighbours (specks do not count).",
    },
    {
        "step": "scale",
        "what": f"Resample the ink levels (float32) of the box, centred, so that its longer side becomes "
        f"{DIGIT_BOX} px and the shorter side round(side x scale) px, with {SURROUND} px of surroundings on "
        "each side: Pillow resize with BOX when shrinking (each pixel the mean of the area it covers), LANCZOS "
        "when enlarging (small digits are enlarged too).",
    },
    {
        "step": "stroke",
        "what": f"Stroke width = 2 x ink / outline (sum of the gradient lengths) of the scaled digit, clipped to "
        f"0-1. Below {THIN_STROKE} px, as from a thin pen on a large page: resample the box at {FINE}x instead "
        f"({FINE * DIGIT_BOX} px, {FINE * SURROUND} px of surroundings), denoise it as below with floor = "
        f"{NOISE_FLOOR:g} x noise x (mean gain over the box) x min(1, {FINE} x scale), pad it with "
        f"{FINE * DIGIT_BOX // 4} px of 0, divide it by the median of its levels >= {BOX_LEVEL} and clip to 0-1 "
        "(a pen's line is full ink), then dilate it one pixel at a time (3x3 max, alternately square and "
        f"cross, square first; at most {4 * FINE} times). After each dilation, scale it as above from the box of "
        f"its pixels with level >= {BOX_LEVEL} (the thickened strokes fill MNIST's {DIGIT_BOX} px box, as a "
        f"pen's do) and measure its width; stop once it reaches {TYPICAL_STROKE} px, the median of MNIST's "
        "training digits, and keep whichever of the last two is nearer to it.",
    },
    {
        "step": "denoise",
        "what": f"floor = {NOISE_FLOOR:g} x noise x (mean gain over the box) x min(1, scale), at most 0.5; top = "
        "min(1, largest level). Level = clip((level - floor) / (top - floor), 0, 1); nothing left means blank.",
    },
    {
        "step": "centre",
        "what": f"Paste the scaled digit (with its surroundings) into a black {MNIST_SIZE}x{MNIST_SIZE} image at "
        f"offset floor({MNIST_SIZE // 2} - centre of mass + 0.5) per axis (pixel indices from 0), clipped so that "
        "every pixel with level >= 0.5 stays inside; what falls outside is cut. uint8 = round(level x 255).",
    },
    {
        "step": "normalize",
        "what": "Model input, float32 [1, 28, 28] (a batch stacks them): (uint8 / 255 - mean) / std.",
    },
]


class NoInkError(ValueError):
    """The picture holds no ink to read: blank, one colour, or nothing but noise."""


def to_mnist_digit(image: Image.Image) -> np.ndarray:
    """The digit in ``image`` as MNIST draws it: uint8 [28, 28], light ink on black. Raises NoInkError."""
    rgb = _composite(*_read(image))
    ink, gain, noise = _ink_level(rgb)
    top, left, bottom, right = box = _ink_box(ink, gain)
    noise *= float(gain[top:bottom, left:right].mean())  # the noise the digit itself carries
    digit, remaining_noise = _scale(ink, box, noise)
    return _centre(_denoise(digit, remaining_noise))


def to_model_input(image: Image.Image, mean: float, std: float) -> torch.Tensor:
    """The model's input for ``image``: float32 [1, 28, 28], normalized with the training data's mean and std."""
    digit = torch.from_numpy(to_mnist_digit(image)).float()
    return ((digit / 255 - mean) / std).unsqueeze(0)


def _read(image: Image.Image) -> tuple[np.ndarray, np.ndarray | None]:
    """float32 RGB [H, W, 3] on 0-255, and alpha [H, W] on 0-1 if any pixel is transparent."""
    if image.format == "JPEG" and max(image.size) > MAX_SIDE:
        # Decoding at a fraction of the size is part of the shrink step: far faster than decoding every pixel.
        # (Only a JPEG not yet decoded can be: Pillow then decodes ``image`` itself at that size.)
        factor = max(image.size) // MAX_SIDE
        image.draft(None, (image.width // factor, image.height // factor))
    image = ImageOps.exif_transpose(image)
    factor = -(-max(image.size) // MAX_SIDE)  # ceiling division
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):  # 16-bit greyscale, which convert() would clip to 8 bits
        image = _float_image(np.asarray(image, dtype=np.float32) / 257)
        grey = np.asarray(image.reduce(factor) if factor > 1 else image)
        return np.repeat(grey[:, :, None], 3, axis=2), None
    transparent = image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info
    image = image.convert("RGBA" if transparent else "RGB")
    if factor > 1:
        image = image.reduce(factor)
    pixels = np.asarray(image, dtype=np.float32)
    if not transparent or pixels[:, :, 3].min() == 255:
        return pixels[:, :, :3], None
    return pixels[:, :, :3], pixels[:, :, 3] / 255


def _composite(rgb: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    """Transparent pixels become paper: the picture's own paper, or a sheet contrasting with ink drawn on nothing."""
    if alpha is None:
        return rgb
    if not alpha.any():
        raise NoInkError("the picture is fully transparent")
    if alpha.mean() >= 0.5:
        paper = np.median(rgb[alpha >= 0.5], axis=0)
    else:
        grey = (rgb.mean(axis=2) * alpha).sum() / alpha.sum()
        paper = np.full(3, 255.0 if grey < 128 else 0.0, dtype=np.float32)
    return rgb * alpha[:, :, None] + paper * (1 - alpha[:, :, None])


def _ring(h: int, w: int) -> np.ndarray:
    """bool [h, w]: True on the outer BORDER of each side, where the paper is read."""
    dy, dx = max(1, round(h * BORDER)), max(1, round(w * BORDER))
    ring = np.ones((h, w), dtype=bool)
    ring[dy : h - dy, dx : w - dx] = False
    return ring


def _border(array: np.ndarray) -> np.ndarray:
    """The pixels of the outer ring of ``array`` [H, W, ...], as [N, ...]."""
    return array[_ring(*array.shape[:2])]


def _robust_spread(values: np.ndarray) -> float:
    """The standard deviation of ``values`` if they are normal, unmoved by a minority of outliers (1.4826 x MAD)."""
    return 1.4826 * float(np.median(np.abs(values - np.median(values))))


def _paper(rgb: np.ndarray) -> np.ndarray:
    """The paper colour at every pixel, [H, W, 3]: a quadratic surface fitted to the border (see STEPS)."""
    h, w = rgb.shape[:2]
    y = np.arange(h, dtype=np.float32) / max(h - 1, 1) - 0.5
    x = np.arange(w, dtype=np.float32) / max(w - 1, 1) - 0.5
    rows, cols = np.nonzero(_ring(h, w))
    by, bx = y[rows], x[cols]
    terms = np.stack([np.ones_like(bx), bx, by, bx * bx, bx * by, by * by], axis=1).astype(np.float64)
    border = _border(rgb).astype(np.float64)
    # Ink that reaches the edge is not paper: leave out border pixels far from the fit (first, the median).
    distance = np.linalg.norm(border - np.median(border, axis=0), axis=1)
    for _ in range(2):
        inliers = distance <= np.median(distance) + max(3 * _robust_spread(distance), 2.0)
        a, b = terms[inliers], border[inliers]
        # The 6x6 normal equations: a tall least-squares problem costs far more here, for the same answer.
        c = np.linalg.lstsq(a.T @ a, a.T @ b, rcond=None)[0].astype(np.float32)  # [6 terms, 3 channels]
        distance = np.linalg.norm(border - terms @ c, axis=1)
    # c0 + c1 x + c2 y + c3 x^2 + c4 xy + c5 y^2, for each channel, one row and one column at a time.
    across = c[0] + x[:, None] * c[1] + (x * x)[:, None] * c[3]  # [W, 3]
    slope = c[2] + x[:, None] * c[4]  # [W, 3]
    return across[None] + y[:, None, None] * slope[None] + (y * y)[:, None, None] * c[5]


def _mean3x3(array: np.ndarray) -> np.ndarray:
    padded = np.pad(array, 1, mode="edge")
    rows = padded[:-2] + padded[1:-1] + padded[2:]
    return (rows[:, :-2] + rows[:, 1:-1] + rows[:, 2:]) / 9


def _ink_level(rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Each pixel's ink level [H, W] (paper 0, ink 1; noise scatters it around both), the light's gain [H, W] and
    the paper's noise before the gain."""
    paper = _paper(rgb)
    grey = np.maximum(paper.mean(axis=2), DARK)
    gain = grey.max() / grey
    # Light multiplies paper and ink alike, so offsets are measured as if all the paper had the brightest light.
    offset = (rgb - paper) * gain[:, :, None]
    length = np.linalg.norm(offset, axis=2)
    strongest = _mean3x3(length).max()  # the mean ignores single noisy pixels
    if strongest <= 0:
        raise NoInkError("the picture is one uniform colour")
    candidates = offset[length >= strongest / 2]
    direction = np.median(candidates, axis=0)
    if not direction.any():
        raise NoInkError("no ink stands out from the paper")
    direction /= np.linalg.norm(direction)
    contrast = float((candidates @ direction).max())
    if contrast <= 0:
        raise NoInkError("no ink stands out from the paper")
    level = offset @ (direction / contrast)
    # The gain amplifies noise in the shadows: noise is measured, and ink told from it, before the gain.
    noise = _robust_spread(_border(level / gain))
    if contrast < MIN_CONTRAST * 255 * np.sqrt(3) or noise * MIN_SIGNAL_TO_NOISE > 1:
        raise NoInkError("no ink stands out from the paper")
    return level.astype(np.float32), gain.astype(np.float32), noise


def _ink_box(ink: np.ndarray, gain: np.ndarray) -> tuple[int, int, int, int]:
    """(top, left, bottom, right), bottom and right exclusive, of the ink that is not a speck of noise."""
    # Strokes stay strong in the 3x3 mean while noise fades; its noise is measured, not assumed to be a third of
    # the pixels', because JPEG and camera noise are correlated between neighbours.
    smooth = _mean3x3(ink / gain)
    border = _border(smooth)
    mask = (ink >= BOX_LEVEL) & (smooth >= np.median(border) + BOX_NOISE * _robust_spread(border))
    h, w = mask.shape
    padded = np.pad(mask, 1)
    neighbours = sum(padded[y : y + h, x : x + w] for y in range(3) for x in range(3) if (y, x) != (1, 1))
    return _bounds(mask & (neighbours > 0))


def _bounds(mask: np.ndarray) -> tuple[int, int, int, int]:
    """(top, left, bottom, right), bottom and right exclusive, of the True pixels of ``mask``."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if len(rows) == 0:
        raise NoInkError("no ink stands out from the paper")
    return int(rows[0]), int(cols[0]), int(rows[-1]) + 1, int(cols[-1]) + 1


def _resample(ink: np.ndarray, box: tuple[int, int, int, int], longer_side: int) -> np.ndarray:
    """The box of ``ink``, centred and scaled so that its longer side is ``longer_side``, with its surroundings."""
    top, left, bottom, right = box
    height, width = bottom - top, right - left
    scale = longer_side / max(height, width)
    surround = SURROUND * longer_side / DIGIT_BOX
    out_h, out_w = max(1, round(height * scale)), max(1, round(width * scale))
    pad = int(np.ceil((surround + 1) / scale)) + 1  # paper around the picture, so the box never leaves it
    picture = _float_image(np.pad(ink, pad))
    # Centred on the bounding box: rounding the output size never shifts the digit.
    y0 = pad + top + (height - out_h / scale) / 2 - surround / scale
    x0 = pad + left + (width - out_w / scale) / 2 - surround / scale
    size = (round(out_w + 2 * surround), round(out_h + 2 * surround))
    area = (x0, y0, x0 + size[0] / scale, y0 + size[1] / scale)
    return np.asarray(picture.resize(size, _filter(scale), box=area))


def _filter(scale: float) -> Image.Resampling:
    """Shrinking averages the pixels each output pixel covers, as anti-aliasing a drawing does; enlarging
    interpolates smoothly."""
    return Image.Resampling.BOX if scale < 1 else Image.Resampling.LANCZOS


def _float_image(array: np.ndarray) -> Image.Image:
    """A Pillow image of mode F (32-bit float) holding ``array``."""
    return Image.fromarray(np.ascontiguousarray(array, dtype=np.float32))


def _stroke_width(digit: np.ndarray) -> float:
    """Mean stroke width in pixels: twice the ink over the length of its outline."""
    digit = np.clip(digit, 0, 1)
    outline = np.hypot(np.diff(digit, axis=0)[:, :-1], np.diff(digit, axis=1)[:-1, :]).sum()
    return 2 * float(digit.sum()) / max(float(outline), 1e-6)


def _dilate(digit: np.ndarray, step: int) -> np.ndarray:
    """Grey-level dilation by one pixel: 3x3 square on even steps, cross on odd ones (together, near round)."""
    padded = np.pad(digit, 1)
    h, w = digit.shape
    shifts = [(y, x) for y in range(3) for x in range(3)]
    if step % 2:
        shifts = [(0, 1), (1, 0), (1, 1), (1, 2), (2, 1)]
    return np.max([padded[y : y + h, x : x + w] for y, x in shifts], axis=0)


def _scale(ink: np.ndarray, box: tuple[int, int, int, int], noise: float) -> tuple[np.ndarray, float]:
    """The boxed digit at DIGIT_BOX px, thin strokes thickened; and the noise left after shrinking."""
    scale = DIGIT_BOX / max(box[2] - box[0], box[3] - box[1])
    digit = _resample(ink, box, DIGIT_BOX)
    if _stroke_width(digit) < THIN_STROKE:
        # A thin pen on a large page: at 20 px its lines are fainter and thinner than any of MNIST's. (Thick
        # strokes are left alone: thinning them costs more accuracy than it gains.)
        fine = _denoise(_resample(ink, box, FINE * DIGIT_BOX), noise * min(1.0, FINE * scale))
        fine = np.pad(fine, FINE * DIGIT_BOX // 4)  # room for the strokes to grow
        # A pen's line is full ink, but one thinner than a pixel covers each pixel only in part, unevenly (a
        # faint, dotted line once thickened): its median level, as in MNIST's strokes, becomes full ink.
        fine = np.clip(fine / np.median(fine[fine >= BOX_LEVEL]), 0, 1)
        digits, widths = [], []
        for step in range(4 * FINE):
            fine = _dilate(fine, step)
            # MNIST's 20 px box holds the strokes as written, so the thickened digit is boxed anew: thickened
            # in place, it would come out larger than MNIST's by the width it gained.
            digits.append(_resample(fine, _bounds(fine >= BOX_LEVEL), DIGIT_BOX))
            widths.append(_stroke_width(digits[-1]))
            if widths[-1] >= TYPICAL_STROKE:
                break
        # Each step widens the strokes by half a pixel: the nearest to the typical width is kept.
        digit = digits[int(np.argmin(np.abs(np.array(widths) - TYPICAL_STROKE)))]
    return digit, noise * min(1.0, scale)


def _denoise(digit: np.ndarray, noise: float) -> np.ndarray:
    """Levels on [0, 1], with what is left of the paper's noise taken away and full ink at 1."""
    floor = min(NOISE_FLOOR * float(noise), 0.5)
    top = min(float(digit.max()), 1.0)
    if top <= floor:
        raise NoInkError("no ink stands out from the paper")
    return np.clip((digit - floor) / (top - floor), 0, 1).astype(np.float32)


def _centre(digit: np.ndarray) -> np.ndarray:
    """The digit pasted into 28x28 with its centre of mass on pixel (14, 14), as uint8. If that would take ink
    (level >= 0.5) off the edge, the digit moves as little as keeps it in; faint surroundings may be cut."""
    h, w = digit.shape
    mass = digit.sum()
    centre_y = (digit.sum(axis=1) * np.arange(h)).sum() / mass
    centre_x = (digit.sum(axis=0) * np.arange(w)).sum() / mass
    rows, cols = np.flatnonzero((digit >= 0.5).any(axis=1)), np.flatnonzero((digit >= 0.5).any(axis=0))
    top = int(np.floor(MNIST_SIZE // 2 - centre_y + 0.5))
    left = int(np.floor(MNIST_SIZE // 2 - centre_x + 0.5))
    if len(rows):
        top = int(np.clip(top, -rows[0], MNIST_SIZE - 1 - rows[-1]))
        left = int(np.clip(left, -cols[0], MNIST_SIZE - 1 - cols[-1]))
    canvas = np.zeros((MNIST_SIZE, MNIST_SIZE), dtype=np.float32)
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + h, MNIST_SIZE), min(left + w, MNIST_SIZE)
    canvas[y0:y1, x0:x1] = digit[y0 - top : y1 - top, x0 - left : x1 - left]
    return np.round(canvas * 255).astype(np.uint8)
