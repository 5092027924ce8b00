# %% [markdown]
# # Train your own Keras model from a function
#
# Write the training as a Python function of one argument, `ctx`, and run it as a TFJob
# with `TFJobClient.train`: no image to build. The function's source (with the functions,
# imports and constants it uses) travels to the pods in a ConfigMap; the trainer image
# creates the strategy TF_CONFIG implies and calls the function on every replica that
# trains (under ParameterServerStrategy, on the coordinator). What it returns is the
# replica's result, what it prints its log. Run it as a script, or paste the cells into a
# notebook. `EXAMPLE_NAMESPACE` and `EXAMPLE_IMAGE` change the namespace and the trainer
# image.
#
# The model learns scikit-learn's 8x8 handwritten digits (1,797 images, in the image:
# no download).

# %%
import json
import os
from typing import Any

from tfjob_operator.client import TFJobClient

tfjobs = TFJobClient(os.environ.get("EXAMPLE_NAMESPACE"))
image = os.environ.get("EXAMPLE_IMAGE")
EPOCHS = 8


# %% [markdown]
# The function runs in the pods: import TensorFlow inside it (the notebook needs none),
# build the model under `ctx.strategy.scope()`, and give `fit` a dataset function, which
# both strategies take. `ctx.global_batch_size` is the batch of one synchronous step
# across every replica; `ctx.export_model` saves the model the multi-worker way.


# %%
def train_digits(ctx: Any) -> dict[str, Any]:
    import tensorflow as tf
    import tf_keras
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.data / 16.0).astype("float32")
    labels = digits.target.astype("int64")

    def dataset(input_context: Any) -> Any:
        batch = input_context.get_per_replica_batch_size(ctx.global_batch_size)
        data = tf.data.Dataset.from_tensor_slices((images, labels))
        data = data.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return data.shuffle(len(images), seed=7).repeat().batch(batch).prefetch(2)

    with ctx.strategy.scope():
        model = tf_keras.Sequential(
            [
                tf_keras.layers.Input(shape=(64,)),
                tf_keras.layers.Dense(64, activation="relu"),
                tf_keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=tf_keras.optimizers.Adam(0.01),
            loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    steps = len(images) // ctx.global_batch_size
    history = model.fit(
        tf_keras.utils.experimental.DatasetCreator(dataset),
        epochs=EPOCHS,
        steps_per_epoch=steps,
        verbose=2,
    )
    ctx.export_model(model)
    return {
        "accuracy": round(float(history.history["accuracy"][-1]), 4),
        "loss": round(float(history.history["loss"][-1]), 4),
        "replicas": ctx.num_replicas,
        "strategy": str(ctx.strategy_name),
    }


# %% [markdown]
# Two workers under MultiWorkerMirroredStrategy, then a coordinator, two workers and one
# parameter server under ParameterServerStrategy: the same function. The model directory
# is on a claim every replica mounts (`/shared`, made if it does not exist): under
# ParameterServerStrategy the parameter servers write the variables of the saved model.

# %%
results = {}
for name, ps in (("digits-mwms", 0), ("digits-pss", 1)):
    tfjobs.train(
        train_digits, name=name, workers=2, ps=ps, image=image, pvc="tfjob-data", pvc_size="1Gi"
    )
    job = tfjobs.wait(name, timeout=600)
    if not job.succeeded:
        print(tfjobs.describe(name))
        raise SystemExit(f"{name} {job.state}: {job.reason}: {job.message}")
    results[name] = tfjobs.results(name)
    print(f"results of {name}: {json.dumps(results[name], sort_keys=True)}")

# %% [markdown]
# Each training replica's result is what the function returned. Delete the jobs (their
# pods and the ConfigMap of the function go with them).

# %%
for name in results:
    tfjobs.delete(name, wait=True)
