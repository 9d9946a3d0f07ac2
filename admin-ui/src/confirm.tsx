// The guard rail of every destructive action in the console (delete a draft, unpublish an API,
// delete a cluster, overwrite drafts on import): a dialog naming the object and what happens
// to it; for the irreversible ones the operator types the object's name to enable the button.
// The registry's answer (refusal, conflict) stays in the dialog.
import type { ComponentChildren } from "preact";
import { useState } from "preact/hooks";
import { useAction } from "./shared/hooks";
import { Button, ErrorBanner, Field, Modal } from "./ui";

export function ConfirmDialog(props: {
  title: string;
  children: ComponentChildren;
  /** The button's words: say what happens ("Unpublish order.get from every gateway"). */
  confirmLabel: string;
  /** When set, the operator types this (the object's name) to enable the button. */
  typeToConfirm?: string;
  onConfirm: () => Promise<void>;
  onClose: () => void;
}) {
  const [typed, setTyped] = useState("");
  const ready = !props.typeToConfirm || typed.trim() === props.typeToConfirm;
  const { run, busy, error } = useAction(props.onConfirm);
  const go = () => ready && run();
  return (
    <Modal
      tone="danger"
      title={props.title}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose}>Cancel</Button>
          <Button kind="danger" busy={busy} disabled={!ready} onClick={go} data-testid="confirm-danger">
            {props.confirmLabel}
          </Button>
        </>
      }
    >
      {props.children}
      {props.typeToConfirm && (
        <Field label={`Type ${props.typeToConfirm} to confirm`}>
          <input
            data-testid="confirm-name"
            value={typed}
            autoComplete="off"
            spellcheck={false}
            onInput={(e) => setTyped((e.target as HTMLInputElement).value)}
            onKeyDown={(e) => e.key === "Enter" && go()}
          />
        </Field>
      )}
      <ErrorBanner error={error} title="Refused" />
    </Modal>
  );
}
