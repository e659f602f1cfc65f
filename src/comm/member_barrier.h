#pragma once
// A store-based barrier that ends the creation of a group.
//
// [Note: a group is ready only when every member has joined]
// Gloo's full-mesh connect returns on one rank as soon as its own side of
// every pair is up, which can be before a peer has finished reading the
// handshake on the other side. If the fast rank then destroys the group (a
// sub-group that was only probed, a mesh that goes out of scope after an
// error) it closes sockets the slow rank is still reading, and the slow rank
// fails with "Connection closed by peer". torch.distributed's new_group ends
// with a store-based barrier for this reason, and so does every group here:
// no member leaves creation before every member has finished it. The barrier
// has the group's timeout, and a timeout names the members that never came.

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>

namespace fsdp::comm {

// Marks this member as having begun to create the group: a failure to
// create it can then name the members that never began (absent_members).
void announce_joining(c10d::Store& store, int rank);

// "1, 3": the members of a group of `size` that have not called
// announce_joining on `store`; "none" if all have.
std::string members_not_joining(c10d::Store& store, int size);

// Blocks until all `size` members of the group `name` called this with the
// same `store` (already prefixed for the group), or throws after `timeout`
// naming the ranks that did not arrive.
void wait_for_every_member(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           const std::string& name, std::chrono::milliseconds timeout);

}  // namespace fsdp::comm
