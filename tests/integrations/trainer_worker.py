"""One rank of tests/integrations/test_accelerate.py's multi-process Trainer run:
a tiny GPT-2 for 3 steps, writing the logged losses and the final weights."""
import json
import sys

import torch
import transformers

import torch_tpu  # noqa: F401


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        ids = (torch.arange(8) * 3 + i) % 64
        return {"input_ids": ids, "labels": ids}


def main(out, batch):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    args = transformers.TrainingArguments(output_dir=out + ".trainer", max_steps=3, per_device_train_batch_size=batch,
                                          logging_steps=1, report_to=[], seed=0, dataloader_pin_memory=False,
                                          disable_tqdm=True, save_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens())
    trainer.train()
    state = trainer.accelerator.state
    result = {"losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
              "device": str(next(model.parameters()).device), "processes": state.num_processes,
              "rank": state.process_index, "backend": state.backend,
              "weights": {k: v.detach().cpu().flatten()[:64].tolist() for k, v in model.named_parameters()}}
    with open("%s.%d.json" % (out, state.process_index), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
