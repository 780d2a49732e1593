local nn = require "nn"
local hp = nn.hparams { n_experts = { hf = "num_experts_per_tok" } }
