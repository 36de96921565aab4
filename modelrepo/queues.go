package modelrepo

import (
	"fmt"
	"strconv"

	"github.com/fw-serve/fw/batcher"
	pb "github.com/fw-serve/fw/grpcapi/inferencepb"
)

// maxPolicyQueue bounds one level's max_queue_size, and the queue of all
// levels together: what a queue may hold must fit in memory.
const maxPolicyQueue = 1 << 20

// checkQueues refuses dynamic batching priority levels and queue
// policies that Triton refuses, with its sentences (name is the model's).
func checkQueues(db *pb.ModelDynamicBatching, name string) error {
	if err := checkPolicy(db.GetDefaultQueuePolicy(), "default_queue_policy"); err != nil {
		return err
	}
	for level, p := range db.GetPriorityQueuePolicy() {
		if err := checkPolicy(p, fmt.Sprintf("priority_queue_policy %d", level)); err != nil {
			return err
		}
	}
	levels := db.GetPriorityLevels()
	if levels == 0 {
		if len(db.GetPriorityQueuePolicy()) > 0 {
			return fmt.Errorf("dynamic_batching priority_queue_policy needs priority_levels for %s: set priority_levels to the number of levels, or move the policy to default_queue_policy", name)
		}
		if db.GetDefaultPriorityLevel() != 0 {
			return fmt.Errorf("dynamic_batching default_priority_level needs priority_levels for %s: set priority_levels, or remove default_priority_level", name)
		}
		return nil
	}
	if d := db.GetDefaultPriorityLevel(); d < 1 || d > levels {
		return fmt.Errorf("default priority level must be in range [1, %d] for %s", levels, name)
	}
	for level := range db.GetPriorityQueuePolicy() {
		if level < 1 || level > levels {
			return fmt.Errorf("priority queue policy must have priority level in range [1, %d] for %s", levels, name)
		}
	}
	return nil
}

// checkPolicy refuses a policy whose timeout_action is no action (the
// text format takes any number for an enum).
func checkPolicy(p *pb.ModelQueuePolicy, what string) error {
	if _, ok := pb.ModelQueuePolicy_TimeoutAction_name[int32(p.GetTimeoutAction())]; !ok {
		return fmt.Errorf("dynamic_batching %s timeout_action %d is not an action: use REJECT or DELAY", what, p.GetTimeoutAction())
	}
	return nil
}

// queues is the batcher's form of db's priority levels and queue
// policies (checked by checkQueues).
func queues(db *pb.ModelDynamicBatching) batcher.Queues {
	q := batcher.Queues{Levels: db.GetPriorityLevels(), DefaultLevel: db.GetDefaultPriorityLevel(), Policy: queuePolicy(db.GetDefaultQueuePolicy())}
	for level, p := range db.GetPriorityQueuePolicy() {
		if q.ByLevel == nil {
			q.ByLevel = make(map[uint64]batcher.QueuePolicy)
		}
		q.ByLevel[level] = queuePolicy(p)
	}
	return q
}

// queuePolicy is the batcher's form of a ModelQueuePolicy (nil: none).
func queuePolicy(p *pb.ModelQueuePolicy) batcher.QueuePolicy {
	return batcher.QueuePolicy{
		MaxQueue:      int(min(p.GetMaxQueueSize(), maxPolicyQueue)),
		Timeout:       batcher.MicrosecondsDuration(p.GetDefaultTimeoutMicroseconds()),
		AllowOverride: p.GetAllowTimeoutOverride(),
		Delay:         p.GetTimeoutAction() == pb.ModelQueuePolicy_DELAY,
	}
}

// queueSizes is how many requests q's policies let wait in all, when
// every level has a bounded queue (0 when one has none, or there are more
// levels than policies bound).
func queueSizes(q batcher.Queues) int {
	if q.Levels == 0 {
		return q.Policy.MaxQueue
	}
	total := 0
	for _, p := range q.ByLevel {
		if p.MaxQueue == 0 {
			return 0
		}
		total += p.MaxQueue
	}
	if uint64(len(q.ByLevel)) < q.Levels {
		if q.Policy.MaxQueue == 0 {
			return 0
		}
		others := q.Levels - uint64(len(q.ByLevel))
		if others > maxPolicyQueue {
			return maxPolicyQueue
		}
		total += int(others) * q.Policy.MaxQueue
	}
	return min(total, maxPolicyQueue)
}

// queuesJSON is db's priority levels and queue policies as Triton's JSON
// renders them (serving.ModelConfig.Queues); nil without dynamic_batching.
func queuesJSON(db *pb.ModelDynamicBatching) map[string]any {
	if db == nil {
		return nil
	}
	policy := func(p *pb.ModelQueuePolicy) map[string]any {
		return map[string]any{"timeout_action": p.GetTimeoutAction().String(), "default_timeout_microseconds": p.GetDefaultTimeoutMicroseconds(),
			"allow_timeout_override": p.GetAllowTimeoutOverride(), "max_queue_size": p.GetMaxQueueSize()}
	}
	levels := map[string]any{}
	for level, p := range db.GetPriorityQueuePolicy() {
		levels[strconv.FormatUint(level, 10)] = policy(p)
	}
	return map[string]any{"priority_levels": db.GetPriorityLevels(), "default_priority_level": db.GetDefaultPriorityLevel(),
		"default_queue_policy": policy(db.GetDefaultQueuePolicy()), "priority_queue_policy": levels}
}
