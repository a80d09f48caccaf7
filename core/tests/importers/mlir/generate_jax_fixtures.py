"""Regenerates the jax_*.stablehlo.mlir fixtures and their .npz data (needs `pip install jax`; CI does not)."""
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

OUT = str(pathlib.Path(__file__).parent) + "/"
rng = np.random.default_rng(0)
def r(*s, scale=0.5): return (rng.standard_normal(s) * scale).astype(np.float32)

def save(name, f, args):
    text = jax.jit(f).lower(*args).as_text()
    out = np.asarray(jax.jit(f)(*args))
    open(OUT + name + ".stablehlo.mlir", "w").write(text)
    np.savez(OUT + name + ".npz", **{f"in{i}": a for i, a in enumerate(args)}, out=out)
    print(name, len(text))

# MLP
w1, b1, w2, b2 = r(16, 32), r(32), r(32, 10), r(10)
def mlp(x, w1, b1, w2, b2):
    h = jax.nn.relu(x @ w1 + b1)
    return jax.nn.softmax(h @ w2 + b2, axis=-1)
save("jax_mlp", mlp, [r(4, 16), w1, b1, w2, b2])

# CNN NHWC
def cnn(x, k1, k2, wd):
    y = jax.lax.conv_general_dilated(x, k1, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jax.nn.relu(y)
    y = jax.lax.reduce_window(y, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    y = jax.lax.conv_general_dilated(y, k2, (2, 2), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC"))
    y = jnp.tanh(y)
    y = jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 1, 1, 1), "VALID") / 4.0
    y = y.mean(axis=(1, 2))
    return y @ wd
save("jax_cnn", cnn, [r(2, 12, 12, 3), r(3, 3, 3, 8), r(3, 3, 8, 8), r(8, 5)])

# transformer block
D, H, T = 16, 2, 6
def block(x, wq, wk, wv, wo, g1, be1, w1, w2):
    def ln(z, g, b):
        mu = z.mean(-1, keepdims=True)
        var = ((z - mu) ** 2).mean(-1, keepdims=True)
        return (z - mu) / jnp.sqrt(var + 1e-5) * g + b
    h = ln(x, g1, be1)
    q, k, v = h @ wq, h @ wk, h @ wv
    sp = lambda t: t.reshape(t.shape[0], T, H, D // H).transpose(0, 2, 1, 3)
    q, k, v = sp(q), sp(k), sp(v)
    s = jnp.einsum("bhtd,bhsd->bhts", q, k) / np.sqrt(D // H)
    mask = jnp.tril(jnp.ones((T, T), bool))
    s = jnp.where(mask, s, -1e9)
    a = jax.nn.softmax(s, axis=-1)
    o = jnp.einsum("bhts,bhsd->bhtd", a, v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = x + o @ wo
    return x + jax.nn.gelu(ln(x, g1, be1) @ w1, approximate=False) @ w2
save("jax_transformer", block, [r(2, T, D, scale=1.0), r(D, D), r(D, D), r(D, D), r(D, D), 1 + r(D, scale=0.1),
                                r(D, scale=0.1), r(D, 32), r(32, D)])
