#pragma once
// The two autograd attachments that tell a unit where backward is.
//
// [Note: backward hooks]
// Pre-backward: a tensor hook on each of the unit's outputs fires when the
// gradient for that output has been computed, before any of the unit's own
// backward ops run: the moment to gather the parameters again.
// Post-backward: the unit's forward inputs are routed through one identity
// node. The engine runs it once the gradients of all of them are complete,
// i.e. after every backward op of the unit ran. AccumulateGrad nodes have the
// highest priority in the engine's ready queue, so the unit's parameter
// gradients are accumulated by then: the moment to reduce them. A parameter
// that no rank used simply has no gradient then (see [Note: unused-parameter
// flags]). Units whose inputs need no gradient (the root, the first unit
// after an integer input) are finished by the root's final callback.

#include <memory>

#include "fsdp/tensor_walk.h"

namespace fsdp::detail {

class UnitState;

// [Note: abandoned forwards]
// A forward whose outputs die without backward reaching them (a loss check
// that throws before backward, an output the model drops) would leave its
// unit counting a pending backward, and a unit kept gathered for backward
// holding its parameters until the next step. So the hooks on one forward's
// outputs share a token; when the last of them dies with the graph and no
// hook fired, the token tells the unit (UnitState::forward_abandoned).
//
// Returns true if at least one output got a hook.
bool attach_pre_backward_hooks(TensorRefs& outputs, const std::weak_ptr<UnitState>& unit);

// Replaces every input that requires grad by an alias wired through one
// post-backward node. Returns true if there was such an input.
bool attach_post_backward_node(TensorRefs& inputs, const std::weak_ptr<UnitState>& unit);

}  // namespace fsdp::detail
