#include "runtime/batch_plan.h"

#include <stdexcept>
#include <string>

namespace deltaserve::runtime {

const float* ForwardOutput::sequence_logits(size_t i, int64_t j) const {
  if (i >= host_logit_begin.size() || host_logit_begin[i] < 0 || j < 0 || j >= sequence_logit_rows(i))
    throw std::logic_error("forward output: sequence " + std::to_string(i) + " logit row " + std::to_string(j) +
                           " has no logits on the host (logits_to_host = false, or out of range)");
  return row_logits(host_logit_begin[i] + j);
}

void ForwardOutput::begin_layout(int64_t vocab) {
  num_rows = 0;
  num_vocab = vocab;
  num_hidden_rows = 0;
  num_host_rows_planned_ = 0;
  logit_begin.clear();
  host_logit_begin.clear();
  hidden_begin.clear();
}

void ForwardOutput::add_sequence(int32_t num_logits, int64_t num_hidden, bool to_host) {
  logit_begin.push_back(num_rows);
  host_logit_begin.push_back(to_host ? num_host_rows_planned_ : -1);
  hidden_begin.push_back(num_hidden_rows);
  num_rows += num_logits;
  if (to_host) num_host_rows_planned_ += num_logits;
  num_hidden_rows += num_hidden;
}

}  // namespace deltaserve::runtime
