"""The handout's ten questions as its text states them: what a student pastes under a question's
heading, which is the question's text and never an answer (``grader.handin.report``, issue 57).

The course's handout is not copied into the project; its questions are (``tests/test_a5_report.py``
checks them against the handout where it lies beside the checkout).
"""

from __future__ import annotations

from grader.handin.report import Report, read_report

QUESTIONS = {
    "Q1": (
        "To keep things simple, we have established that we will not support other sharding dimensions "
        "such as data parallelism or tensor parallelism. In all pipeline parallel ranks, we will create "
        "the full model and then shard it. Because of this, all processes will receive the same seed and "
        "will therefore generate the same weights and inputs. However, outside this fictitious scenario "
        "created for the exercise, answer the following questions and explain why:\n"
        "\n"
        "1. In each process, should the seed across the pipeline parallel dimension be the same or "
        "different?\n"
        "2. In each process, should the seed across the data parallel dimension be the same or "
        "different?\n"
        "3. In each process, should the seed across the tensor parallel dimension be the same or "
        "different? Hint: Remember that when applying tensor parallelism we shard most of the linear "
        "layers but we don't shard the layernorm layers.\n"
        "4. Now imagine using all three sharding techniques simultaneously. Have you detected any "
        "inconsistencies in your answers? Can you think of a way to solve this?"
    ),
    "Q2": (
        "When applying pipeline parallelism to a model, we need to ensure that the workload of each "
        "stage is as balanced as possible, since the performance of the pipeline will always be "
        "constrained by the slowest stage. Another commonly used technique in this type of scenario is "
        "to divide the work into smaller units (micro-batches) to process more data concurrently across "
        "the different pipeline stages. Assert that the arguments satisfy these two conditions."
    ),
    "Q3": (
        "In this exercise, we will use the model defined in `model.py`. Examine the model definition. "
        "What shape will the tensors that we communicate across the pipeline stages have?"
    ),
    "Q4": (
        "Write the code that performs the following:\n"
        "1. Fetch a batch of data from the dataloader.\n"
        "2. Move the batch of data to the appropriate device.\n"
        "3. Compute the forward pass.\n"
        "4. Compute the backward pass. Note that since we do not have a label tensor, we will compute a "
        "fake loss value using the `.mean()` of the output tensor."
    ),
    "Q5": (
        "Carefully examine the `pipeline_parallel.py` file and implement the `distribute_layers` "
        "function, which will return a list of the layers contained in each pipeline stage."
    ),
    "Q6": ("Which ranks require the training dataloader?"),
    "Q7": (
        "Observe the `pipeline_communicate` function in `pipeline_parallel.py`. Using Figure 1 for "
        "reference, explain when each of the four possible `operation` cases will occur. You can sketch "
        "in the image which communications each GPU will carry out and when. Keep in mind that those "
        "operations are P2P involving 2 pipeline stages. Correctly complete the four `if` statements "
        "within each `operation`. This function returns `None` when not performing any P2P communication."
    ),
    "Q8": (
        "Write the code that performs the following:\n"
        "1. Fetch a batch of data from the dataloader if needed.\n"
        "2. Move the batch from the dataloader OR the activations from the previous pipeline parallel "
        "stage to the appropriate GPU.\n"
        "3. Compute the forward pass.\n"
        "4. Compute the backward pass. Use the `.mean()` of the output tensor as the loss function.\n"
        "Note that the first layer might need special treatment since its input tensor doesn't have "
        "gradients enabled."
    ),
    "Q9": ("Check the model outputs in the required rank. Do they pass the `assert_close` test?"),
    "Q10": (
        "Check the gradients of the required layers. Remember that in each pipeline stage, you only have "
        "a subset of the original model’s layers, so you only need to verify the gradients of the "
        "weights for the layers contained in each rank."
    ),
}


def read(text: str) -> Report:
    """A report read as A5 reads it: with its questions' text, so that a pasted question answers nothing."""
    return read_report(text, QUESTIONS)
