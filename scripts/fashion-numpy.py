#!/usr/bin/python3
"""One epoch of the Fashion-MNIST training examples in NumPy, for speed.

The same models, batch schedule and optimizer as examples/fashion
(softmax.toml and mlp.toml): round r takes batch (r-1) mod (60000/batch)
of the training set in file order; the gradient is the batch's mean
cross-entropy gradient; Adam (beta1 0.9, beta2 0.999, eps 1e-8) steps
once a round, at the perceptron's learning rate falling linearly from lr
to lr_end over decay_rounds rounds; the model's accuracy on the 10,000
test images is measured after every round (softmax) or after every 60th
(the perceptron, evaluate_every = 60), as idlepool's update step does. Floating point here
is NumPy's (BLAS sums in its own order), so the numbers are not
idlepool's bits; the perceptron's first weights come from NumPy's
generator, not from SplitMix64. It prints, per model, the seconds of one
epoch without and with the evaluations, and the accuracy after it.

Usage: /usr/bin/python3 scripts/fashion-numpy.py DIR [EPOCHS]
DIR holds the four unpacked IDX files (make bench-train-numpy:
bin/fashion-mnist). Needs Debian's python3-numpy.
"""
import sys
import time

import numpy as np


def idx(path, header):
    with open(path, "rb") as f:
        return np.frombuffer(f.read()[header:], dtype=np.uint8)


def load(d):
    xtr = idx(d + "/train-images-idx3-ubyte", 16).reshape(-1, 784)
    ytr = idx(d + "/train-labels-idx1-ubyte", 8)
    xte = idx(d + "/t10k-images-idx3-ubyte", 16).reshape(-1, 784)
    yte = idx(d + "/t10k-labels-idx1-ubyte", 8)
    return xtr / 255.0, ytr, xte / 255.0, yte


def softmax_ce(z, y):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    p = e / s
    loss = np.mean(np.log(s[:, 0]) - z[np.arange(len(y)), y])
    p[np.arange(len(y)), y] -= 1
    return loss, p


class Adam:
    def __init__(self, params, lr, lr_end=None, decay_rounds=0):
        self.lr, self.t = lr, 0
        self.lr_end, self.decay_rounds = lr_end, decay_rounds
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def step(self, params, grads):
        self.t += 1
        b1, b2 = 0.9, 0.999
        lr = self.lr
        if self.decay_rounds > 0:
            lr += (self.lr_end - self.lr) * min(self.t - 1, self.decay_rounds) / self.decay_rounds
        for p, g, m, v in zip(params, grads, self.m, self.v):
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= lr * (m / (1 - b1 ** self.t)) / (np.sqrt(v / (1 - b2 ** self.t)) + 1e-8)


class Softmax:
    name, batch, lr, lr_end, decay_rounds, eval_every = "softmax", 6000, 0.03, None, 0, 1

    def __init__(self):
        self.params = [np.zeros((784, 10)), np.zeros(10)]

    def logits(self, x):
        return x @ self.params[0] + self.params[1]

    def grads(self, x, y):
        loss, d = softmax_ce(self.logits(x), y)
        n = len(y)
        return loss, [x.T @ d / n, d.sum(axis=0) / n]


class MLP:
    name, batch, lr, lr_end, decay_rounds, eval_every, hidden = "mlp", 1000, 0.002, 0.00005, 900, 60, 128

    def __init__(self):
        rng = np.random.default_rng(0)
        h = self.hidden
        l1, l2 = np.sqrt(6 / (784 + h)), np.sqrt(6 / (h + 10))
        self.params = [rng.uniform(-l1, l1, (784, h)), np.zeros(h),
                       rng.uniform(-l2, l2, (h, 10)), np.zeros(10)]

    def logits(self, x):
        w1, b1, w2, b2 = self.params
        return np.maximum(x @ w1 + b1, 0) @ w2 + b2

    def grads(self, x, y):
        w1, b1, w2, b2 = self.params
        a = x @ w1 + b1
        h = np.maximum(a, 0)
        loss, dz = softmax_ce(h @ w2 + b2, y)
        n = len(y)
        dh = (dz @ w2.T) * (a > 0)
        return loss, [x.T @ dh / n, dh.sum(axis=0) / n, h.T @ dz / n, dz.sum(axis=0) / n]


def epoch(model, data, epochs):
    xtr, ytr, xte, yte = data
    opt = Adam(model.params, model.lr, model.lr_end, model.decay_rounds)
    per = len(ytr) // model.batch
    train_s = eval_s = 0.0
    for r in range(per * epochs):
        lo = (r % per) * model.batch
        t0 = time.perf_counter()
        loss, g = model.grads(xtr[lo:lo + model.batch], ytr[lo:lo + model.batch])
        opt.step(model.params, g)
        t1 = time.perf_counter()
        if (r + 1) % model.eval_every == 0 or r + 1 == per * epochs:
            acc = np.mean(model.logits(xte).argmax(axis=1) == yte)
        eval_s += time.perf_counter() - t1
        train_s += t1 - t0
    print("%-8s batch %d, lr %g, %d rounds an epoch: %.2f s an epoch training, %.2f s with the held-out"
          " evaluation after every %s; after %d epoch(s): loss %.4f, held-out accuracy %.2f%%"
          % (model.name, model.batch, model.lr, per, train_s / epochs, (train_s + eval_s) / epochs,
             "round" if model.eval_every == 1 else "%d rounds" % model.eval_every, epochs, loss, 100 * acc))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    data = load(sys.argv[1])
    print("NumPy %s, %d training and %d test images" % (np.__version__, len(data[1]), len(data[3])))
    for m in (Softmax(), MLP()):
        epoch(m, data, epochs)


if __name__ == "__main__":
    main()
