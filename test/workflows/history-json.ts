// Workflow histories as JSON files, in the format of `temporal workflow show --output json`.
// package.json pins protobufjs 8 at the top level so that @temporalio/common and
// @temporalio/proto share one copy; with two copies the SDK's functions throw
// "type must be a Type" (the protojson extension checks `instanceof Type` against its own copy).
import { historyFromJSON, historyToJSON, type History } from '@temporalio/common/lib/proto-utils';

/** A fetched history as pretty-printed proto3 JSON. */
export const historyToJson = (history: History): string => historyToJSON(history);

/** A parsed JSON history as a History that Worker.runReplayHistory accepts. */
export const historyFromJson = (json: unknown): History => historyFromJSON(json);
