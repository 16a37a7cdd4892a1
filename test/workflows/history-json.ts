// Workflow histories as JSON files, in the format of `temporal workflow show --output json`.
//
// @temporalio/common's historyToJSON / historyFromJSON do exactly this, but they throw "type must
// be a Type" when npm installs protobufjs 8 twice, once under @temporalio/common and once under
// @temporalio/proto (today's lockfile: the top-level slot holds @grpc/proto-loader's protobufjs 7),
// because the protojson extension checks `instanceof Type` against its own copy while the History
// type comes from the other. Both functions here try the SDK first and, on that one error,
// rebuild the History type inside the copy the extension belongs to. Delete the fallback once
// package.json depends on protobufjs 8 directly (one hoisted copy; see the replay test's notes).
import { createRequire } from 'node:module';
import { historyFromJSON, historyToJSON, type History } from '@temporalio/common/lib/proto-utils';

interface ReflectedType {
  fromObject(object: unknown): unknown;
  toObject(message: unknown): unknown;
}
interface ProtoJson {
  toJson(type: ReflectedType, message: unknown): unknown;
  fromJson(type: ReflectedType, json: unknown, options: { ignoreUnknownFields: boolean }): unknown;
}
interface ProtobufRoot {
  toJSON(): unknown;
}
interface Protobufjs {
  Root: { fromJSON(json: unknown): { lookupType(name: string): ReflectedType } };
}

const isDuplicateProtobufjs = (err: unknown): boolean => err instanceof TypeError && err.message === 'type must be a Type';

let fallback: { type: ReflectedType; protojson: ProtoJson } | null = null;
/** The History type rebuilt in the protobufjs copy that @temporalio/common's protojson uses. */
function sameCopy(): { type: ReflectedType; protojson: ProtoJson } {
  if (fallback) return fallback;
  const fromCommon = createRequire(createRequire(import.meta.url).resolve('@temporalio/common'));
  const protobufjs = fromCommon('protobufjs') as Protobufjs;
  const protojson = fromCommon('protobufjs/ext/protojson') as ProtoJson;
  const temporalRoot = fromCommon('@temporalio/proto') as ProtobufRoot;
  const type = protobufjs.Root.fromJSON(temporalRoot.toJSON()).lookupType('temporal.api.history.v1.History');
  fallback = { type, protojson };
  return fallback;
}

/** A fetched history as pretty-printed proto3 JSON. */
export function historyToJson(history: History): string {
  try {
    return historyToJSON(history);
  } catch (err) {
    if (!isDuplicateProtobufjs(err)) throw err;
  }
  const { type, protojson } = sameCopy();
  return JSON.stringify(protojson.toJson(type, type.fromObject(history)), null, 2);
}

/** A parsed JSON history as a History that Worker.runReplayHistory accepts. */
export function historyFromJson(json: unknown): History {
  try {
    return historyFromJSON(json);
  } catch (err) {
    if (!isDuplicateProtobufjs(err)) throw err;
  }
  const { type, protojson } = sameCopy();
  // A plain object with Long event ids: the worker encodes it as it is.
  return type.toObject(protojson.fromJson(type, json, { ignoreUnknownFields: true })) as History;
}
