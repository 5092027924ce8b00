# %% [markdown]
# # Train a TFJob from Python
#
# Submit a distributed TensorFlow job, follow its replicas' logs, wait for it, read its
# results and clean up, with the project's client (`pip install tfjob-operator`, or
# `pip install ./operator` from a checkout). Run it as a script, or paste the cells into
# a notebook. It uses the kubeconfig's current context (in a pod, its service account);
# `EXAMPLE_NAMESPACE` and `EXAMPLE_IMAGE` change the namespace and the trainer image.

# %%
import os

from tfjob_operator.client import TFJobClient

tfjobs = TFJobClient(os.environ.get("EXAMPLE_NAMESPACE"))
print(f"namespace {tfjobs.namespace} on {tfjobs.rest.connection.server}")

# %% [markdown]
# Two workers under MultiWorkerMirroredStrategy train the trainer's built-in digits model
# for 5 epochs: the same TFJob `tfjob-operator new digits --workers 2` writes.

# %%
choices = {"workers": 2, "train_args": ["--epochs", "5"]}
if os.environ.get("EXAMPLE_IMAGE"):
    choices["image"] = os.environ["EXAMPLE_IMAGE"]
job = tfjobs.create_from("digits", **choices)
print(f"created {job.api_version} {job.name}")

# %% [markdown]
# Every replica's log, as it is written, each line prefixed by its replica; the loop ends
# when the job has finished.

# %%
for line in tfjobs.logs("digits", follow=True):
    print(line)

# %%
job = tfjobs.wait("digits", timeout=600)
if not job.succeeded:
    print(tfjobs.describe("digits"))  # the replicas, their exit codes, events, logs
    raise SystemExit(f"digits {job.state}: {job.reason}: {job.message}")

# %% [markdown]
# Each worker's `TFJOB_RESULT` line, as a dict. Worker 0's is the job's: the job succeeds
# when worker 0 does, and a worker still running then is stopped (`cleanPodPolicy:
# Running`, the default), so a worker that was still shutting down may have none.

# %%
results = tfjobs.results("digits")
for replica, result in results.items():
    print(f"{replica}: accuracy {result['accuracy']:.3f}, loss {result['loss']:.3f}")

# %%
tfjobs.delete("digits", wait=True)
