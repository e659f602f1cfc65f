#include "generate.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <vector>

namespace fsdp_train {

std::string generate(fsdp::Sharded<fsdp::models::GPT>& model, const GenerateOptions& options) {
  at::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  std::vector<int64_t> tokens(options.prompt.begin(), options.prompt.end());
  for (auto& t : tokens) t &= 0xff;  // bytes, whatever char's signedness
  std::string out;
  for (int64_t i = 0; i < options.bytes; ++i) {
    const int64_t window = std::min<int64_t>(static_cast<int64_t>(tokens.size()), options.context);
    at::Tensor input =
        at::tensor(std::vector<int64_t>(tokens.end() - window, tokens.end()), at::kLong)
            .view({1, window})
            .to(options.device);
    // Sampled on the CPU with a CPU generator: the same bytes on any device.
    at::Tensor logits =
        model->forward(input).select(1, window - 1).squeeze(0).to(at::kFloat).cpu();
    int64_t next = 0;
    if (options.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      at::Tensor probs = at::softmax(logits / options.temperature, -1);
      next = at::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
    }
    tokens.push_back(next);
    out.push_back(static_cast<char>(next));
  }
  model->train(was_training);
  return out;
}

std::string printable(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back((b < 0x20 && c != '\n' && c != '\t') || b == 0x7f ? '?' : c);
  }
  return out;
}

}  // namespace fsdp_train
